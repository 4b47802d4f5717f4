import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo admin user if missing and print its credentials."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username, **options):
        password_file = settings.DATA_DIR / "admin-password.txt"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None or not password_file.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser(username, "", password)
            else:
                user.set_password(password)
                user.save()
            settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        self.stdout.write(
            f"admin user: {username}  password: {password}  (kept in {password_file})"
        )
