"""The `ulorl` command line: train | sft | eval | clean | plot | plan | show | export | config.

Configuration follows verl's style: a YAML preset plus dotted overrides,
`ulorl train --config configs/demo.yaml rollout.num_segments=4 algo.is_mode=sais`.
Every command writes into a run folder (`--output-dir`, default
`runs/<command>-<timestamp>`) holding the resolved config and its outputs.
"""

from __future__ import annotations

import argparse
import errno
import sys
import time
from dataclasses import dataclass
from pathlib import Path

OVERRIDES_HELP = ("dotted config overrides, e.g. rollout.num_segments=4 algo.is_mode=sais train.steps=20 "
                  "(every key and its default: `ulorl config`)")


def _quiet_transformers() -> None:
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _run_dir(args, command: str) -> Path:
    if args.output_dir:
        return Path(args.output_dir)
    return Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"


def _load_cfg(args):
    from ulorl.config import load_run_config

    return load_run_config(args.config, args.overrides)


def _add_preset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, help="YAML preset (see configs/); defaults apply without one")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    _add_preset_args(p)
    p.add_argument("--output-dir", "-o", default=None, help="run folder (default: runs/<command>-<timestamp>)")


def _config_lines(cfg, args, run_dir: Path) -> str:
    """A run's first lines: where its config came from and the settings that differ from the defaults (every
    setting is in the run folder's config.yaml, and `ulorl config` prints them)."""
    from ulorl.config import changed_settings

    source = args.config or "the defaults"
    if args.overrides:
        source += f" + {len(args.overrides)} override{'s' * (len(args.overrides) > 1)}"
    changed = changed_settings(cfg)
    head = (f"[ulorl] config: {source}; {len(changed) or 'no'} setting{'s' * (len(changed) != 1)} "
            f"differ{'s' * (len(changed) == 1)} from the defaults (every setting: {run_dir / 'config.yaml'})")
    return "\n".join([head + (":" if changed else "")] + [f"  {line}" for line in changed])


def cmd_train(args) -> int:
    from ulorl.errors import ConfigError
    from ulorl.run.loop import train
    from ulorl.run.report import format_summary

    if args.resume == "auto" and not args.output_dir:  # else a new runs/train-<time> folder, with nothing to resume
        raise ConfigError("--resume auto continues the run in --output-dir: give it (-o RUN, the run's folder)")
    cfg = _load_cfg(args)
    run_dir = _run_dir(args, "train")
    print(_config_lines(cfg, args, run_dir), flush=True)
    summary = train(cfg, run_dir, resume=args.resume)  # also written to RUN/summary.json
    print(format_summary(summary))
    return 0


def cmd_sft(args) -> int:
    from ulorl.config import check_runnable, dump_yaml
    from ulorl.run.checkpoint import atomic_write_text, make_run_dir
    from ulorl.run.console import say
    from ulorl.run.lock import RunLock
    from ulorl.run.numerics import apply_cpu_numerics
    from ulorl.run.session import check_data, use_train_threads
    from ulorl.run.sft import SFTStopped
    from ulorl.run.sft_report import format_sft_report, prepare_sft_dir, sft_and_report
    from ulorl.run.sft_state import sft_settings

    cfg = _load_cfg(args)
    apply_cpu_numerics(cfg.train.cpu_numerics)  # before any tensor operation, as `ulorl train` does
    check_runnable(cfg, sft=True)
    use_train_threads(cfg)
    # the SFT trains on its built-in task and is scored on data.eval: a held-out file that is not there, or a bad
    # row of it, stops here, not after the SFT
    check_data(cfg, ("eval",))
    run_dir = make_run_dir(_run_dir(args, "sft"))
    with RunLock.acquire(run_dir):  # one process per folder, as for train
        prepare_sft_dir(run_dir, sft_settings(cfg.model, cfg.sft, cfg.eval.sampling()))
        atomic_write_text(run_dir / "config.yaml", dump_yaml(cfg))
        print(_config_lines(cfg, args, run_dir), flush=True)
        try:
            report = sft_and_report(cfg, run_dir)
        except SFTStopped:
            say(f"the same command continues it: ulorl sft --config {run_dir / 'config.yaml'} --output-dir {run_dir}")
            raise
    print(format_sft_report(report, run_dir, args.config))
    return 0


def cmd_config(args) -> int:
    from ulorl.config import changed_settings, dump_yaml

    cfg = _load_cfg(args)
    if args.changed:
        print("\n".join(changed_settings(cfg)) or "no settings differ from the defaults")
    else:
        print(dump_yaml(cfg).rstrip("\n"))
    return 0


def _add_show_config_args(p: argparse.ArgumentParser) -> None:
    _add_preset_args(p)
    p.add_argument("--changed", action="store_true",
                   help="print only the settings that differ from the defaults, one `key: value (default: ...)` "
                   "per line, as train and sft print them at start")


def _add_train_args(p: argparse.ArgumentParser) -> None:
    _add_config_args(p)
    p.add_argument("--resume", default=None, metavar="auto|never|PATH",
                   help="auto: continue from the newest complete checkpoint of --output-dir (an error when "
                   "checkpoints exist but none verifies); never: start over, moving an earlier run's files "
                   "aside; PATH: a checkpoint folder")


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in `ulorl --help`, its own help's description, the functions that add its
    arguments and run it ("module:function", imported when the parser is built), and the command lines its help
    ends with (`examples`: (line, what it does); the tests parse every one)."""

    name: str
    help: str
    description: str
    arguments: str
    run: str
    examples: tuple[tuple[str, str], ...] = ()

    def epilog(self) -> str | None:
        if not self.examples:
            return None
        return "\n".join(["examples:", *(f"  # {what}\n  {line}" for line, what in self.examples)])


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's own, but a command's examples keep their lines (descriptions are still filled)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


COMMANDS = (
    Command("train", "RL training with segment rollout (the main job)",
            "Run UloRL training. With the built-in defaults: SFT warm start of the tiny model, accuracy before, RL "
            "with segment rollout, accuracy after, summary.", "ulorl.cli:_add_train_args", "ulorl.cli:cmd_train",
            (("ulorl train --config configs/demo.yaml -o runs/demo", "the demo: SFT warm start, then RL"),
             ("ulorl train --config configs/demo.yaml rollout.num_segments=2 algo.is_mode=sais -o runs/sais",
              "overrides: any key of `ulorl config`"),
             ("ulorl train --config configs/demo.yaml -o runs/sais --resume auto", "continue where it stopped"))),
    Command("sft", "supervised warm start of the model on the built-in task",
            "Train the model on worked solutions (sft.* settings), save an HF folder, report held-out accuracy and "
            "the response-length distribution.", "ulorl.cli:_add_config_args", "ulorl.cli:cmd_sft",
            (("ulorl sft --config configs/demo.yaml -o runs/sft", "the demo's warm start alone, then its report"),)),
    Command("eval", "avg@k / pass@k evaluation of a model on datasets",
            "Evaluate a model: avg@k, unbiased pass@k, length stats, truncation rate.",
            "ulorl.evaluation.cli:add_eval_arguments", "ulorl.evaluation.cli:run_eval",
            (("ulorl eval --model runs/sft/model --data builtin:chain --k 8 -o runs/eval", "avg@8, pass@k"),
             ("ulorl eval --model runs/demo/export --config runs/demo/config.yaml -o runs/eval-demo",
              "as the run's report scored it"),
             ("ulorl eval --model my-model --data test.jsonl --prompt-key question --answer-key solution",
              "your data, your columns"))),
    Command("clean", "the paper's data-cleaning pipeline",
            "Apply cleaning steps to a dataset; writes OUTPUT and OUTPUT.report.json.",
            "ulorl.cleaning.clean:add_clean_arguments", "ulorl.cleaning.clean:run_clean",
            (("ulorl clean --input data.jsonl --output clean.jsonl --steps multi_question,short_answer,long_answer",
              "the rule steps"),)),
    Command("plot", "PNG figures overlaying runs' metrics",
            "Plot entropy, reward, lengths, mask ratio, pools, segments, step time.",
            "ulorl.run.plot:add_plot_arguments", "ulorl.run.plot:run_plot",
            (("ulorl plot runs/a runs/b -o plots/", "one PNG a panel and an overview, both runs overlaid"),)),
    Command("plan", "predict the time per step for each segment count M and recommend one",
            "Simulate segment rollout (the real pools and rollout, lengths drawn from a distribution) and price it "
            "with a cost model: predicted step time, speedup, utilisation, re-prefill share and staleness for each "
            "M.", "ulorl.plan.cli:add_plan_arguments", "ulorl.plan.cli:run_plan",
            (("ulorl plan --lengths-from runs/demo --calibrate --prompt-len 10", "a run's lengths, this CPU's costs"),
             ("ulorl plan --lengths lognormal:median=16384,sigma=0.82 --max-len 65536 --decode-batch 1024 "
              "--train-groups 128 --prompt-len 256 --paged --fit-table 1=1240,2=774", "the paper's Table 1"),
             ("ulorl plan --memory --model qwen3-4b --lengths-k 32,64,128 --checkpointing",
              "learner and KV memory at each L"))),
    Command("show", "print the samples of a training step (text, reward, segments, versions)",
            "Print what the model wrote at one step of a `ulorl train` run, group by group, from its "
            "samples.jsonl: reward, length, stop reason, segments and their versions.",
            "ulorl.run.show:add_show_arguments", "ulorl.run.show:run_show",
            (("ulorl show runs/demo --step 20", "what the model wrote at step 20"),
             ("ulorl show runs/demo --status dropped --chars -1", "the dropped groups, whole texts"))),
    Command("export", "a run's trained model as a plain Hugging Face folder (LoRA merged)",
            "Write a run's checkpoint (the newest complete one, or --step N) as a Hugging Face folder: config, "
            "safetensors, tokenizer, generation config; LoRA adapters merged.",
            "ulorl.run.export:add_export_arguments", "ulorl.run.export:run_export",
            (("ulorl export runs/demo", "the newest complete checkpoint -> runs/demo/export"),
             ("ulorl export runs/demo --step 10 -o step10", "step 10's, into step10/"))),
    Command("config", "print the resolved configuration",
            "Print the resolved config (preset + overrides) as YAML, validating every key.",
            "ulorl.cli:_add_show_config_args", "ulorl.cli:cmd_config",
            (("ulorl config", "every key and its default"),
             ("ulorl config --config configs/demo.yaml --changed", "what a preset changes"))),
)


def build_parser() -> argparse.ArgumentParser:
    from ulorl import __version__
    from ulorl.reward.zygote import resolve_function  # "module:function" -> the function

    p = argparse.ArgumentParser(prog="ulorl", description="UloRL: RL for language models with ultra-long answers "
                                "(segment rollout, POIS/SAIS/TOIS, DMMPTs).")
    p.add_argument("--version", action="version", version=f"ulorl {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of a user error (anywhere on the line)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        c = sub.add_parser(command.name, help=command.help, description=command.description,
                           epilog=command.epilog(), formatter_class=_HelpFormatter)
        resolve_function(command.arguments)(c)
        c.set_defaults(func=resolve_function(command.run), parser=c)
    return p


# -- one handler for every user error --------------------------------------------------------------
# what an OSError means for the user, by errno, after its own text (the message names the path the error
# concerns); no flag is named: each command names its output differently
_OS_HINTS = {
    errno.ENOSPC: "the disk is full; free space and run again, and a train run with --resume auto continues from "
                  "its last complete checkpoint",
    errno.EDQUOT: "the disk quota is exceeded; free space and run again",
    errno.EACCES: "choose a path you can write",
    errno.EPERM: "choose a path you can write",
    errno.EROFS: "choose a path on a file system that can be written",
    errno.ENOTDIR: "a part of this path is a file, not a folder",
    errno.EEXIST: "it exists and is not a folder",
    errno.EISDIR: "it is a folder where a file is expected",
    errno.ENOENT: "no such file or folder",
}


def _os_message(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    hint = _OS_HINTS.get(e.errno or 0)
    return f"{where}{e.strerror or e}" + (f" ({hint})" if hint else "")


# exit statuses, one per cause (docs/reliability.md)
EXIT_USER_ERROR = 2  # bad config, data, checkpoint or path: the message names it and the fix
EXIT_NON_FINITE = 3  # repeated non-finite updates: the last good state is checkpointed
EXIT_STALLED = 4  # rollout rounds could not fill a batch: stall_report.json says why
EXIT_PROCESS_DIED = 5  # a process of the run (the overlap learner) died: --resume auto continues
EXIT_INTERRUPTED = 130


def _learner_message(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    cause = f": {lines[-1].strip()}" if len(lines) > 1 else ""
    return f"{lines[0].rstrip(':') if lines else e}{cause} (--debug shows its traceback); --resume auto continues"


def _user_errors() -> list[tuple[type[BaseException], int, object]]:
    """(exception type, exit status, message) for every error a user can cause; first match wins."""
    from ulorl.errors import UlorlError
    from ulorl.learners.process import LearnerProcessError
    from ulorl.run.stall import StallError

    return [
        (StallError, EXIT_STALLED, str),
        (FloatingPointError, EXIT_NON_FINITE, str),
        (LearnerProcessError, EXIT_PROCESS_DIED, _learner_message),
        (UlorlError, EXIT_USER_ERROR, str),  # ConfigError, CheckpointError, DataError, ...: names the key/file/row
        (OSError, EXIT_USER_ERROR, _os_message),
        (UnicodeError, EXIT_USER_ERROR, lambda e: f"text that is not valid UTF-8: {e}"),
        (RecursionError, EXIT_USER_ERROR, lambda e: "input nested too deeply to read"),
        (KeyboardInterrupt, EXIT_INTERRUPTED, lambda e: "interrupted"),
    ]


def _flag_hint(parser: argparse.ArgumentParser, stray: list[str]) -> str:
    """For a command that takes flags only (eval, clean, plot, ...), what its `KEY=VALUE` arguments mean:
    `eval.num_problems=10` -> `; ulorl eval takes flags, not KEY=VALUE overrides: --num-problems 10`."""
    pairs = [a.split("=", 1) for a in stray if "=" in a and not a.startswith("-")]  # none where overrides are taken
    if not pairs:
        return ""
    flags = set(parser._option_string_actions)
    named = [f"{flag} {value}" for key, value in pairs
             if (flag := "--" + key.rsplit(".", 1)[-1].replace("_", "-")) in flags]
    return (f"; {parser.prog} takes flags, not KEY=VALUE overrides" + (f": {' '.join(named)}" if named else
                                                                        f" (`{parser.prog} --help` lists them)"))


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse, accepting dotted overrides anywhere on the line (also after `--resume auto`)."""
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if stray:  # the command's own usage and name: `ulorl config: error: ...`
        own = getattr(args, "parser", parser)
        own.error(f"unrecognized arguments: {' '.join(stray)}{_flag_hint(own, stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    rest = [a for a in argv if a != "--debug"]
    try:  # the imports of the first second or two (transformers, torch): Ctrl-C there is no traceback either
        _quiet_transformers()
        parser = build_parser()
    except KeyboardInterrupt:
        if debug:
            raise
        print("ulorl: interrupted while starting", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not rest:  # `ulorl` alone: the commands, as `ulorl --help` lists them
        parser.print_help()
        return 0
    args = parse_args(parser, rest)
    try:
        return int(args.func(args) or 0)
    except BaseException as e:
        if debug:
            raise
        for kind, code, message in _user_errors():
            if isinstance(e, kind):
                print(f"ulorl {args.command}: error: {message(e)}", file=sys.stderr)  # type: ignore[operator]
                return code
        raise


if __name__ == "__main__":
    sys.exit(main())
