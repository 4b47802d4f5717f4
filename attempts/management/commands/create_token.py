from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from attempts.api.tokens import token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print it (shown once; only its hash is kept)."

    def add_arguments(self, parser):
        parser.add_argument("user")
        parser.add_argument("--name", default="", help="What the token is for.")

    def handle(self, *args, user, name, **options):
        found = get_user_model().objects.filter(username=user).first()
        if found is None:
            raise CommandError(f"no user {user!r}: create one with `manage.py createsuperuser`")
        _row, token = token_create(user=found, name=name)
        self.stdout.write(token)
