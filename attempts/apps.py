from django.apps import AppConfig


class AttemptsConfig(AppConfig):
    name = "attempts"
    verbose_name = "Boltz attempts"
