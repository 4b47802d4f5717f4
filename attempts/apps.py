"""The attempts app; once it is loaded, what follows the end of an attempt subscribes to it."""

from django.apps import AppConfig


class AttemptsConfig(AppConfig):
    name = "attempts"
    verbose_name = "Boltz attempts"

    def ready(self) -> None:
        from attempts.core.ended import attempt_ended
        from attempts.services import callbacks, predictions, validation

        # In every process that can end an attempt (web, worker, commands), in this order:
        # the task's validation mark, the evaluation's report, then the callback.
        for subscriber in (validation, predictions, callbacks):
            attempt_ended.connect(
                subscriber.on_attempt_ended, dispatch_uid=f"{subscriber.__name__}.on_attempt_ended"
            )
