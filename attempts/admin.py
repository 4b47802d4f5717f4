from django.contrib import admin

from .models import Attempt, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("slug", "title", "repo_url", "base_ref", "image", "updated_at")
    search_fields = ("slug", "title")


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = ("__str__", "agent", "status", "outcome", "score", "host", "created_at")
    list_filter = ("status", "outcome", "agent")
    readonly_fields = [f.name for f in Attempt._meta.fields]

    def has_add_permission(self, request):
        return False
