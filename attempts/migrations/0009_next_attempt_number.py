"""Each task keeps the number its next attempt takes, so numbers are never given twice.

Existing tasks start past the highest number they ever gave: their attempts', and those named
in the audit trail (an attempt deleted before this migration still counts).
"""

from django.db import migrations, models
from django.db.models import Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest


def count_past_used_numbers(apps, schema_editor):
    Task = apps.get_model("attempts", "Task")
    Attempt = apps.get_model("attempts", "Attempt")
    AuditEntry = apps.get_model("attempts", "AuditEntry")
    in_attempts = (
        Attempt.objects.filter(task=OuterRef("pk"))
        .values("task")
        .annotate(top=Max("number"))
        .values("top")
    )
    in_audit = (
        AuditEntry.objects.filter(task_slug=OuterRef("slug"), attempt_number__isnull=False)
        .values("task_slug")
        .annotate(top=Max("attempt_number"))
        .values("top")
    )
    Task.objects.update(
        next_attempt_number=Greatest(
            Coalesce(Subquery(in_attempts), Value(0)),
            Coalesce(Subquery(in_audit), Value(0)),
        )
        + 1
    )


class Migration(migrations.Migration):
    dependencies = [("attempts", "0008_evaluations")]

    operations = [
        migrations.AddField(
            model_name="task",
            name="next_attempt_number",
            field=models.PositiveIntegerField(
                default=1,
                editable=False,
                help_text="The number the task's next attempt takes. It only grows: a number "
                "is never given twice, even after its attempt was deleted.",
            ),
        ),
        migrations.RunPython(count_past_used_numbers, migrations.RunPython.noop),
    ]
