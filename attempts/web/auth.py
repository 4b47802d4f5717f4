"""Permissions: staff may do everything in Boltz; others need the permission by name."""

from django.contrib.auth.backends import ModelBackend

VIEW = "attempts.view_attempt"
EXPORT = "attempts.export_attempt"
DELETE = "attempts.delete_attempt"
CONTROL = "attempts.control_attempt"


class StaffBackend(ModelBackend):
    """Grants every `attempts.*` permission to active staff users."""

    def has_perm(self, user_obj, perm, obj=None):
        if user_obj.is_active and user_obj.is_staff and perm.startswith("attempts."):
            return True
        return super().has_perm(user_obj, perm, obj)

    def has_module_perms(self, user_obj, app_label):
        # The admin lists an app's models (its index, the app's page) only to users with some
        # permission in that app: staff have all of Boltz's.
        if user_obj.is_active and user_obj.is_staff and app_label == "attempts":
            return True
        return super().has_module_perms(user_obj, app_label)
