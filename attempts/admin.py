from django.contrib import admin

from .deletion import attempt_delete, task_delete
from .models import Attempt, AuditEntry, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("slug", "title", "repo_url", "base_ref", "image", "updated_at")
    search_fields = ("slug", "title")

    # Deleting goes through the service, so attempts' containers and files go too.
    def delete_model(self, request, obj):
        task_delete(task=obj, by=request.user.get_username())

    def delete_queryset(self, request, queryset):
        for task in queryset:
            task_delete(task=task, by=request.user.get_username())


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = ("__str__", "agent", "status", "outcome", "score", "host", "created_at")
    list_filter = ("status", "outcome", "agent")
    readonly_fields = [f.name for f in Attempt._meta.fields]

    def has_add_permission(self, request):
        return False

    def delete_model(self, request, obj):
        attempt_delete(attempt=obj, by=request.user.get_username())

    def delete_queryset(self, request, queryset):
        for attempt in queryset:
            attempt_delete(attempt=attempt, by=request.user.get_username())


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("time", "actor", "action", "task_slug", "attempt_number", "attempt_id")
    list_filter = ("action",)
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
