from django.core.management.base import BaseCommand, CommandError

from attempts.exports.datasets import (
    FLAVOURS,
    FORMATS,
    ExportRefused,
    ExportSpec,
    why_empty,
    write_export,
)
from attempts.management.commands._common import cli_actor, open_output, parse_date, task_or_error
from attempts.models import Outcome
from attempts.services.attempts import task_export


def meta_path(output: str) -> str:
    """The side file of an export whose format keeps metadata apart: OUT.meta.jsonl."""
    stem = output[: -len(".jsonl")] if output.endswith(".jsonl") else output
    return f"{stem}.meta.jsonl"


class Command(BaseCommand):
    help = (
        "Export a task's attempts: attempt records, or training data a trainer loads as it is "
        "(SFT conversations, DPO/KTO pairs, RL rows, verl parquet). See docs/EXPORTS.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("task", help="task slug")
        parser.add_argument("--format", default="attempts", help=f"one of {', '.join(FORMATS)}")
        parser.add_argument(
            "--flavour",
            help="; ".join(f"{f}: {', '.join(v)}" for f, v in FLAVOURS.items() if len(v) > 1)
            + " (the first is the default)",
        )
        parser.add_argument(
            "--min-score",
            type=float,
            help="sft: train on attempts scoring at least this (default: passed ones only)",
        )
        parser.add_argument(
            "--include-all",
            action="store_true",
            help="sft: keep the examples that are not trainable, with weight 0",
        )
        parser.add_argument(
            "--include-oracles",
            action="store_true",
            help="keep the reference and noop agents' attempts in training formats",
        )
        parser.add_argument("--outcome", choices=Outcome.values)
        parser.add_argument("--agent")
        parser.add_argument("--since", help="attempts created on or after (ISO date)")
        parser.add_argument("--until", help="attempts created before (ISO date)")
        parser.add_argument("-o", "--output", required=True, help="file to write, or -")

    def handle(self, *args, task, output, **options):
        try:
            spec = ExportSpec.parse(
                options["format"],
                options["flavour"],
                min_score=options["min_score"],
                include_all=options["include_all"],
                include_oracles=options["include_oracles"],
            )
        except ExportRefused as exc:
            raise CommandError(str(exc)) from None
        if spec.binary and output == "-":
            raise CommandError(f"{spec.fmt} {spec.flavour} is parquet: give a file with -o")
        task_obj = task_or_error(task)
        filters = {
            "outcome": options["outcome"],
            "agent": options["agent"],
            "since": parse_date(options["since"], "--since"),
            "until": parse_date(options["until"], "--until"),
        }
        attempts = task_export(task=task_obj, spec=spec, by=cli_actor(), **filters)
        out = open_output(output)
        meta = open_output(meta_path(output)) if spec.has_meta and output != "-" else None
        try:
            count = write_export(attempts, spec, out, meta)
        except RuntimeError as exc:  # an optional package the flavour needs
            raise CommandError(str(exc)) from None
        finally:
            for handle in (out, meta):
                if handle is not None and output != "-":
                    handle.close()
        if output == "-":
            return
        kind = f"{spec.fmt} ({spec.flavour})" if len(FLAVOURS[spec.fmt]) > 1 else spec.fmt
        if count == 0:
            shown = {k: options[k] for k in ("outcome", "agent", "since", "until")}
            why = why_empty(
                slug=task_obj.slug,
                task_attempts=task_obj.attempts.all(),
                matched=attempts,
                spec=spec,
                filters=shown,
            )
            self.stdout.write(f"{why}: wrote an empty {kind} file to {output}")
            return
        self.stdout.write(f"wrote {count} {kind} example(s) of {task_obj.slug} to {output}")
        if meta is not None:
            self.stdout.write(f"metadata, line for line: {meta_path(output)}")
