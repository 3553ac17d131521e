"""Command line: `python -m playground run …` for headless runs and scripts.

Bad input exits non-zero with a one-line reason on stderr; the trace can be written as JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .methods import METHODS, parse_assignments
from .models import DEFAULT_TARGET

if TYPE_CHECKING:
    from .engine import RunRequest


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=DEFAULT_TARGET, help="catalogue key, Hub id or local directory")
    parser.add_argument("--assistant", default=None, help="assistant model (speculative, universal, mtp_drafter)")
    parser.add_argument("--method", default="baseline", choices=list(METHODS))
    parser.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                        help="a method parameter under its generate() name, e.g. prompt_lookup_num_tokens=10")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the prompt text")
    prompt.add_argument("--prompt-file", type=Path, help="read the prompt from a file")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 = off")
    parser.add_argument("--seed", type=int, default=0)
    chat = parser.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="raw prompt, no chat template")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--trace-out", type=Path, help="write the trace as JSON here")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    try:
        return args.prompt_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"error: cannot read prompt file: {exc.strerror}") from None


def summary_line(trace) -> str:  # type: ignore[no-untyped-def]
    s = trace.summary
    acc = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.1%}"
    tps = "n/a" if s.tokens_per_s is None else f"{s.tokens_per_s:.1f}"
    return (
        f"[{trace.method}] {s.new_tokens} tokens in {s.steps} steps ({s.tokens_per_step or 0:.2f}/step), "
        f"acceptance {acc} ({s.accepted}/{s.drafted}), {s.elapsed_s:.2f} s, {tps} tok/s, "
        f"{trace.env.get('dtype')}, finish={trace.finish_reason}{', LOSSY' if trace.lossy else ''}"
    )


def request_from_args(args: argparse.Namespace) -> "RunRequest":
    """The engine request a parsed `run` command line stands for."""
    from .engine import RunRequest

    return RunRequest(
        prompt=_read_prompt(args), target=args.target, method=args.method, assistant=args.assistant,
        params=parse_assignments(args.assignments), max_new_tokens=args.max_new_tokens, sample=args.sample,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed, chat=args.chat,
        dtype=args.dtype,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from .engine import run, user_message

    # Loading progress goes to an interactive terminal only: scripts get a single error line.
    show_progress = not args.quiet and sys.stderr.isatty()
    if not show_progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    try:
        request = request_from_args(args)
        progress = (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True)) if show_progress else None
        trace = run(request, progress=progress)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line for the user, whatever failed
        print(f"error: {user_message(exc)}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(trace.output_text)
    print(summary_line(trace))
    if args.trace_out:
        trace.save(args.trace_out)
    return 0


def _load_trace(path: Path):  # type: ignore[no-untyped-def]
    """The trace at path, or None after a one-line error on stderr."""
    from .trace import Trace, TraceFormatError

    try:
        return Trace.load(path)
    except OSError as exc:
        print(f"error: cannot read {path}: {exc.strerror}", file=sys.stderr)
    except TraceFormatError as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
    return None


def cmd_show(args: argparse.Namespace) -> int:
    trace = _load_trace(args.trace)
    if trace is None:
        return 2
    print(summary_line(trace))
    return 0


def cmd_code(args: argparse.Namespace) -> int:
    """Print the Python script that reproduces a saved trace (its models are loaded to resolve the call)."""
    from transformers.utils import logging as hf_logging

    from .engine import user_message
    from .snippet import script_for_trace

    trace = _load_trace(args.trace)
    if trace is None:
        return 2
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        script = script_for_trace(trace)
    except Exception as exc:  # one line for the user, whatever failed
        print(f"error: cannot show the code for {args.trace}: {user_message(exc)}", file=sys.stderr)
        return 2
    print(script, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m playground", description="Assisted-decoding playground")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run one generation and print it with a summary")
    add_run_arguments(run_parser)
    run_parser.set_defaults(func=cmd_run)
    show_parser = sub.add_parser("show", help="check a saved trace and print its summary line")
    show_parser.add_argument("trace", type=Path)
    show_parser.set_defaults(func=cmd_show)
    code_parser = sub.add_parser("code", help="print the Python script that reproduces a saved trace")
    code_parser.add_argument("trace", type=Path)
    code_parser.set_defaults(func=cmd_code)
    from .bench import add_bench_arguments, cmd_bench

    bench_parser = sub.add_parser("bench", help="benchmark drafting methods against baseline (CSV, JSON, HTML report)")
    add_bench_arguments(bench_parser)
    bench_parser.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
