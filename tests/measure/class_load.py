"""Class load: a presenter stepping through a run with a class following, students running their own, paused runs.

Starts `python app.py` on a free port and drives it through Gradio's own protocol (`tests/classroom.py`), plus a few
followers as real Chromium pages (English, Russian, Arabic):

1. alone: the presenter (step-by-step pace, a class link open) presses "Next step" `--presses` times; the presenter's
   step time is press -> the step in the presenter's stream; then a whole run at the free pace (its wall time);
2. followed: `--followers` followers join (`--browsers` of them Chromium pages, the rest protocol clients reading the
   follower's stream) and the same again; each follower's lag is the time from the step reaching the presenter to the
   same step reaching the follower (protocol followers; at the step-by-step pace a follower knows a step once it is
   shown or asked). Protocol followers read Gradio's edits to the last values, as a browser does
   (`--whole-values`: whole values each write, which costs the server more);
   With `--pairs N`, then N pairs of free-pace runs, alone (the followers have left the class) and followed (they
   joined again), the order alternating: each pair's ratio, and the median ratio of the presenter's run time and of
   the server's CPU seconds with a distribution-free 95 % interval (order statistics; N >= 6), the CPU seconds of the
   server's event loop (where the followers' streams and Gradio's writes run; its thread found with `py-spy dump`)
   and of this script's clients (on one machine they share the server's cores), and the followers' lag;
3. class: `--paused` visitors start a run at the step-by-step pace and never press; `--students` students start their
   own `--student-tokens`-token runs at once while the presenter steps on; the students' first token (join -> a first
   token in their stream) and the presenter's step time under that load.

It prints each figure (p50 / p90 / max), the errors, and the server's resident memory over time (psutil, each second).
Where the clients run: in a class each follower's client is a student's own machine, here every client (this script's
threads: the presenter's and the followers' readers; its Chromium pages) shares the server's cores. By default they
take those cores as the server does (nice 0: the figures then carry the clients' own CPU too, the old mode);
`--clients-nice 19` lowers this script's priority, and so its Chromium's, once the server has started (the server
keeps its own), so the clients take mostly what the server leaves idle. That takes the clients' CPU out of the model's
way, not the loopback's: the kernel's work of delivering each message to a client on this machine is still done in
the server's send, and the followers' lag then includes the clients' own wait for a core.
The default models are the bundled Gemma 3 270M (converted once and cached); `--tiny` uses tiny random checkpoints
built in a temporary folder (seconds, for a quick check of the machinery: their steps take milliseconds, so the
times say little about a class).

    python tests/measure/class_load.py                                   # 60 followers, 30 students, 3 paused
    python tests/measure/class_load.py --followers 12 --browsers 3 --students 4 --presses 6 --tiny
    python tests/measure/class_load.py --followers 60 --browsers 0 --students 0 --paused 0 --presses 3 --pairs 8
    python tests/measure/class_load.py --followers 60 --browsers 0 --students 0 --paused 0 --presses 3 --pairs 8 \
        --clients-nice 19                                                # the clients out of the server's way

Not collected by pytest (the file name does not start with test_). A timing means something only on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from appserver import free_port, headless_chromium, start_app, stop_app  # noqa: E402
from classroom import CODE_IN_LINK, Visitor, handlers, shown_after, steps_in  # noqa: E402

ASKED = re.compile(r'data-asked="(\d+)"')
TOKEN = 'class="tok"'


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def line(name: str, values: list[float], unit: str = "s") -> str:
    if not values:
        return f"{name}: none"
    return (f"{name}: n={len(values)} p50 {pct(values, 0.5):.3f} {unit}, p90 {pct(values, 0.9):.3f} {unit}, "
            f"max {max(values):.3f} {unit}, mean {statistics.fmean(values):.3f} {unit}")


class Memory(threading.Thread):
    """The server's resident memory, sampled every second."""

    samples: list[tuple[float, float]]  # (seconds, MiB)
    marks: list[tuple[float, str]]  # (seconds, what happened)

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc, self.samples, self.marks = psutil.Process(pid), [], []
        self.t0 = time.monotonic()
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                self.samples.append((time.monotonic() - self.t0, self.proc.memory_info().rss / 2**20))
            except psutil.Error:
                return
            time.sleep(1.0)

    def mark(self, what: str) -> None:
        self.marks.append((time.monotonic() - self.t0, what))


class Presenter:
    """The presenter's session: its run's stream read in a thread; when each count of steps first reached it."""

    def __init__(self, url: str, deps: dict[str, Any]) -> None:
        self.visitor = Visitor(url, deps)
        self.arrived: dict[int, float] = {}
        self.errors: list[str] = []
        self.done = threading.Event()

    def start(self, args: list[Any]) -> None:
        self.arrived, self.done = {}, threading.Event()
        threading.Thread(target=self._read, args=(args,), daemon=True).start()

    def _read(self, args: list[Any]) -> None:
        shown: list[Any] = []
        try:
            for outputs in self.visitor.stream("generate", args):
                shown = shown_after(shown, outputs)
                n = steps_in(shown[0])
                self.arrived.setdefault(n, time.monotonic())
        except Exception as exc:  # noqa: BLE001 - counted and printed
            self.errors.append(f"presenter: {exc}")
        self.done.set()

    def steps(self) -> int:
        return max(self.arrived, default=0)


class Follower:
    """A protocol follower: when each count of known steps (shown, or asked) first reached it."""

    def __init__(self, url: str, deps: dict[str, Any], code: str, whole: bool = False) -> None:
        self.visitor = Visitor(url, deps, f"?follow={code}")
        self.whole = whole  # whole values each write, where a browser gets Gradio's edits
        self.arrived: dict[int, float] = {}
        self.errors: list[str] = []
        self.writes = 0  # the stream's messages with values (the server's writes to this follower), all runs

    def start(self) -> None:
        self.arrived = {}
        self.visitor.call("join_class")
        self.reading = threading.Thread(target=self._read, daemon=True)
        self.reading.start()

    def leave(self) -> None:
        """The follower stops following (as its page's Generate does): its stream ends, the room forgets it."""
        self.visitor.call("leave_class")

    def _read(self) -> None:
        shown: list[Any] = []
        try:
            for outputs in self.visitor.stream("follow_stream", [None], diffs=not self.whole):
                self.writes += 1
                shown = shown_after(shown, outputs)
                known = steps_in(shown[0]) + (1 if ASKED.search(str(shown[5] or "")) else 0)
                if known < max(self.arrived, default=0):  # the presenter's next run: its steps counted afresh
                    self.arrived = {}
                self.arrived.setdefault(known, time.monotonic())
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"follower: {exc}")


def run_args(prompt: str, target: Any, tokens: int, method: str = "prompt_lookup") -> list[Any]:
    params = {"prompt_lookup_num_tokens": 5} if method == "prompt_lookup" else {}
    return [prompt, target, None, method, params, tokens, False, 1.0, 1.0, 0, 0, "off", "auto", False, None]


def step_through(presenter: Presenter, presses: int, wait_s: float = 600.0) -> list[float]:
    """Press "Next step" `presses` times once the run stands; each press's time to the next step."""
    times = []
    deadline = time.monotonic() + wait_s
    while presenter.steps() < 1 and time.monotonic() < deadline and not presenter.done.is_set():
        time.sleep(0.01)
    for _ in range(presses):
        n = presenter.steps()
        time.sleep(0.3)  # the run stands paused after its step
        pressed = time.monotonic()
        presenter.visitor.call("step_on")
        while presenter.steps() <= n and time.monotonic() < deadline and not presenter.done.is_set():
            time.sleep(0.005)
        if presenter.steps() > n:
            times.append(presenter.arrived[n + 1] - pressed)
    return times


def finish(presenter: Presenter) -> None:
    presenter.visitor.call("set_pace", ["free", 1.0])
    presenter.visitor.call("step_on")
    presenter.done.wait(600)
    presenter.visitor.call("set_pace", ["step", 1.0])


def event_loop_thread(pid: int) -> int | None:
    """The server's event loop's thread (where every follower's stream runs and Gradio writes the streams), found by
    its stack with `py-spy dump`; None where py-spy is not installed or may not read the process."""
    try:
        threads = json.loads(subprocess.run(["py-spy", "dump", "--pid", str(pid), "--json"], capture_output=True,
                                            text=True, timeout=60).stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return next((t.get("os_thread_id") for t in threads
                 if any(f.get("name") == "BaseEventLoop.run_forever" for f in t.get("frames", []))), None)


def thread_cpu(pid: int, tid: int | None) -> float:
    """A thread's CPU seconds (user + system, /proc/PID/task/TID/stat); nan without one."""
    if tid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class RunCost:
    """The presenter's free-pace run: its wall time, and the CPU seconds meanwhile of the server, of the server's
    event loop, and of this script (the clients: on a shared machine they take the same cores)."""
    wall: float
    cpu: float
    loop_cpu: float
    clients_cpu: float
    writes: float = 0.0  # the server's writes to each follower during the run (their mean; 0 alone)


def free_run(presenter: Presenter, args: list[Any], server: psutil.Process, loop: int | None = None) -> RunCost:
    """The presenter's whole run at the free pace (on a shared machine the wall time also carries the other
    processes' load, the clients' own included)."""
    presenter.visitor.call("set_pace", ["free", 1.0])
    me = psutil.Process()
    cpu, loop_cpu, clients_cpu = sum(server.cpu_times()[:2]), thread_cpu(server.pid, loop), sum(me.cpu_times()[:2])
    started = time.monotonic()
    presenter.start(args)
    presenter.done.wait(600)
    wall = time.monotonic() - started
    cost = RunCost(wall, sum(server.cpu_times()[:2]) - cpu, thread_cpu(server.pid, loop) - loop_cpu,
                   sum(me.cpu_times()[:2]) - clients_cpu)
    presenter.visitor.call("set_pace", ["step", 1.0])
    return cost


def student_run(url: str, deps: dict[str, Any], args: list[Any], first: list[float], errors: list[str]) -> None:
    visitor = Visitor(url, deps)
    started = time.monotonic()
    try:
        seen = False
        for outputs in visitor.stream("generate", args):  # read to the end: the student's whole run is load
            if not seen and TOKEN in str(outputs[0]):
                seen = True
                first.append(time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"student: {exc}")
    finally:
        visitor.close()


def paused_run(url: str, deps: dict[str, Any], args: list[Any], stop: threading.Event, errors: list[str]) -> None:
    visitor = Visitor(url, deps)
    try:
        visitor.call("set_pace", ["step", 1.0])
        for _ in visitor.stream("generate", args):
            if stop.is_set():
                break
    except Exception as exc:  # noqa: BLE001
        errors.append(f"paused: {exc}")
    finally:
        visitor.close()


def lags(presenter: Presenter, followers: list[Follower], first: int, last: int) -> list[float]:
    out = []
    for f in followers:
        for n in range(first, last + 1):
            if n in presenter.arrived and n in f.arrived:
                out.append(max(0.0, f.arrived[n] - presenter.arrived[n]))
    return out


def lags_at_least(presenter: Presenter, followers: list[Follower]) -> list[float]:
    """Each follower's lag for each of the presenter's steps: until the follower knew that many steps or more (at the
    free pace a follower is written at most every `follow.FREE_EVERY_S`, so it may never see a count of its own)."""
    out = []
    for f in followers:
        for n, at in presenter.arrived.items():
            seen = [t for known, t in f.arrived.items() if known >= n]
            if n >= 1 and seen:
                out.append(max(0.0, min(seen) - at))
    return out


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float, float]:
    """The median and a distribution-free interval for it: the k-th smallest and largest values, k the largest
    such that P(Binomial(n, 1/2) < k) <= (1 - level) / 2, so the interval holds the population's median with at
    least `level` (nan bounds below 6 values, where none reaches 95 %); and the interval's exact coverage."""
    ordered, n = sorted(values), len(values)
    below, k = 0.0, 0
    while k < n and below + math.comb(n, k) / 2**n <= (1 - level) / 2:
        below += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return statistics.median(ordered), float("nan"), float("nan"), float("nan")
    return statistics.median(ordered), ordered[k - 1], ordered[n - k], 1 - 2 * below


def join_all(followers: list[Follower], wait_s: float = 300.0) -> None:
    for f in followers:
        f.start()
    deadline = time.monotonic() + wait_s
    while any(not f.arrived for f in followers) and time.monotonic() < deadline:
        time.sleep(0.05)


def leave_all(followers: list[Follower], wait_s: float = 60.0) -> None:
    for f in followers:
        f.leave()
    for f in followers:
        f.reading.join(wait_s)


def paired_runs(presenter: Presenter, followers: list[Follower], run: list[Any], server: psutil.Process,
                pairs: int) -> None:
    """The presenter's free-pace run alone and followed, in `pairs` pairs, the order alternating (followed first in
    the first pair, where the class has just joined): what the other processes on a shared machine do then weighs
    on both runs of a pair alike, and the pair's ratio cancels most of it. Prints each pair and the median ratio
    (wall time, and the server's CPU seconds) with its 95 % interval; the CPU seconds of the server's event loop
    (where the followers' streams run) and of this script's clients; and the followers' lag at the free pace."""
    loop = event_loop_thread(server.pid)
    rows: list[dict[str, RunCost]] = []
    lag: list[float] = []
    joined = True
    for i in range(pairs):
        got: dict[str, RunCost] = {}
        for kind in (("followed", "alone") if i % 2 == 0 else ("alone", "followed")):
            if (kind == "followed") != joined:
                (join_all if kind == "followed" else leave_all)(followers)
                joined = kind == "followed"
                time.sleep(1.0)
            written = sum(f.writes for f in followers)
            got[kind] = free_run(presenter, run, server, loop)
            if kind == "followed":
                time.sleep(1.0)  # the last writes reach the followers
                lag += lags_at_least(presenter, followers)
                got[kind].writes = (sum(f.writes for f in followers) - written) / max(1, len(followers))
        a, f = got["alone"], got["followed"]
        rows.append(got)
        print(f"pair {i + 1} ({'followed first' if i % 2 == 0 else 'alone first'}): run {a.wall:.2f} -> "
              f"{f.wall:.2f} s ({(f.wall / a.wall - 1) * 100:+.1f} %), server CPU {a.cpu:.2f} -> {f.cpu:.2f} s "
              f"({(f.cpu / a.cpu - 1) * 100:+.1f} %), its event loop {a.loop_cpu:.2f} -> {f.loop_cpu:.2f} s, "
              f"the clients (this script) {a.clients_cpu:.2f} -> {f.clients_cpu:.2f} s; {f.writes:.1f} writes a follower "
              f"({f.writes / f.wall:.2f} a second of the run)", flush=True)
    if not joined:
        join_all(followers)
    for name, field in (("the presenter's run time", "wall"), ("the server's CPU seconds", "cpu")):
        mid, low, high, cover = median_interval([getattr(r["followed"], field) / getattr(r["alone"], field)
                                                 for r in rows])
        print(f"{len(followers)} followers, {name}, followed / alone over {len(rows)} alternated pairs: median "
              f"{(mid - 1) * 100:+.1f} %, {cover * 100:.1f} % interval {(low - 1) * 100:+.1f} % to "
              f"{(high - 1) * 100:+.1f} % (order statistics); medians alone "
              f"{statistics.median(getattr(r['alone'], field) for r in rows):.2f} s, followed "
              f"{statistics.median(getattr(r['followed'], field) for r in rows):.2f} s", flush=True)
    added = [r["followed"].loop_cpu - r["alone"].loop_cpu for r in rows]
    share = [(r["followed"].loop_cpu - r["alone"].loop_cpu) / r["alone"].wall for r in rows]
    mid, low, high, cover = median_interval(share)
    print(f"the server's event loop's CPU seconds added by the followers: median {statistics.median(added):.2f} s a "
          f"run, {mid * 100:.1f} % of the run alone's wall time ({cover * 100:.1f} % interval {low * 100:.1f} % to "
          f"{high * 100:.1f} %); the clients' own CPU (not the server's; on this machine they share its cores): "
          f"median {statistics.median(r['followed'].clients_cpu for r in rows):.2f} s a followed run, "
          f"{statistics.median(r['alone'].clients_cpu for r in rows):.2f} s alone", flush=True)
    per_write = [(r["followed"].loop_cpu - r["alone"].loop_cpu) / (r["followed"].writes * len(followers)) * 1000
                 for r in rows if r["followed"].writes and followers]
    print(f"writes to each follower: median {statistics.median(r['followed'].writes for r in rows):.1f} a run, "
          f"{statistics.median(r['followed'].writes / r['followed'].wall for r in rows):.2f} a second of the run; the "
          f"event loop's added CPU per write and follower: median "
          f"{statistics.median(per_write) if per_write else float('nan'):.2f} ms", flush=True)
    print(line("followers' lag behind the presenter, free pace, the pairs' followed runs", lag), flush=True)


def main() -> int:  # noqa: C901 - one scenario, in order
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--followers", type=int, default=60)
    parser.add_argument("--browsers", type=int, default=3, help="followers that are Chromium pages (en, ru, ar, ...)")
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--student-tokens", type=int, default=32)
    parser.add_argument("--paused", type=int, default=3)
    parser.add_argument("--presses", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=48, help="the presenter's run")
    parser.add_argument("--whole-values", action="store_true",
                        help="protocol followers read whole values each write (a browser gets Gradio's edits)")
    parser.add_argument("--tiny", action="store_true", help="tiny random models instead of the bundled Gemma")
    parser.add_argument("--clients-nice", type=int, default=0,
                        help="the clients' CPU priority (os.nice, once the server has started): 19 leaves the shared "
                             "cores to the server first, as clients on the students' own machines would; 0, the "
                             "default, lets them compete with it equally")
    parser.add_argument("--pairs", type=int, default=0,
                        help="then this many pairs of free-pace runs, alone and followed, in alternating order: the "
                             "median ratio with a 95 %% interval (at least 6 pairs for one)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # `timeout` stops the script: the server stops with it

    work = Path(tempfile.mkdtemp(prefix="playground-class-"))
    env = {"PLAYGROUND_PRELOAD": "1", "PLAYGROUND_ROOM_FOLLOWERS": str(max(200, args.followers + 10))}
    target: Any = None  # the bundled default
    prompt = ("Rewrite this list in the same format, adding a fifth line:\n"
              "- apples: 3\n- pears: 5\n- plums: 7\n- figs: 2\n")
    if args.tiny:
        from tiny import build_tokenizer, save_tiny_llama

        target = str(save_tiny_llama(work / "target", seed=0, tokenizer=build_tokenizer()))
        env["PLAYGROUND_PRELOAD"] = "0"
    port = free_port()
    log = work / "server.log"
    server = start_app(port, log, env)
    url = f"http://127.0.0.1:{port}/"
    if args.clients_nice:
        os.nice(args.clients_nice)  # this process (every client thread) and the Chromium it starts; not the server
    memory = Memory(server.pid)
    memory.start()
    errors: list[str] = []
    print(f"server pid {server.pid} on port {port}, log {log}; {psutil.cpu_count()} CPUs, "
          f"models: {'tiny' if args.tiny else 'bundled Gemma 3 270M'}; the clients at nice {os.nice(0)}, the server at "
          f"{psutil.Process(server.pid).nice()}", flush=True)
    try:
        deps = handlers(url)
        warm = Visitor(url, deps)
        list(warm.stream("generate", run_args(prompt, target, 4)))  # the model loaded and warm
        presenter = Presenter(url, deps)
        presenter.visitor.call("set_pace", ["step", 1.0])
        hit = CODE_IN_LINK.search(presenter.visitor.call("open_class", [url])[0])
        assert hit is not None
        code = hit.group(1)
        beat = threading.Event()

        def beating() -> None:  # the presenter's page beats once a second, as the page's timer does
            while not beat.wait(1.0):
                try:
                    presenter.visitor.call("class_tick")
                except Exception as exc:  # noqa: BLE001
                    errors.append(f"beat: {exc}")
        threading.Thread(target=beating, daemon=True).start()

        memory.mark("alone")
        presenter.start(run_args(prompt, target, args.tokens))
        alone = step_through(presenter, args.presses)
        finish(presenter)
        alone_cost = free_run(presenter, run_args(prompt, target, args.tokens), memory.proc)
        alone_run, alone_cpu = alone_cost.wall, alone_cost.cpu
        print(line("presenter's step time, alone", alone), flush=True)
        print(f"presenter's run at the free pace, alone: {alone_run:.2f} s, server CPU {alone_cpu:.2f} s", flush=True)

        memory.mark("followers join")
        followers = [Follower(url, deps, code, args.whole_values) for _ in range(max(0, args.followers - args.browsers))]
        for f in followers:
            f.start()
        pages: list[Any] = []
        chromium = None
        if args.browsers:
            chromium_cm = headless_chromium_cm()
            chromium = chromium_cm.__enter__()
            for i in range(args.browsers):
                lang = ("en", "ru", "ar")[i % 3]
                page = chromium.new_page(viewport={"width": 390, "height": 844} if lang == "ar" else None)
                page.goto(f"{url}?follow={code}&lang={lang}")
                pages.append(page)
            for page in pages:
                page.wait_for_selector("#pg-follow-bar [data-testid=pg-follow]", timeout=180_000)
        time.sleep(2)
        counted = re.search(r'data-followers="(\d+)"', presenter.visitor.call("class_tick")[0])
        print(f"followers: {len(followers)} protocol clients + {len(pages)} Chromium pages; the presenter's page "
              f"counts {counted.group(1) if counted else '?'}", flush=True)
        memory.mark("followed")
        presenter.start(run_args(prompt, target, args.tokens))
        followed = step_through(presenter, args.presses)
        time.sleep(1.0)
        lag = lags(presenter, followers, 1, presenter.steps())
        finish(presenter)
        received = sum(f.visitor.received for f in followers)
        followed_cost = free_run(presenter, run_args(prompt, target, args.tokens), memory.proc)
        followed_run, followed_cpu = followed_cost.wall, followed_cost.cpu
        received = sum(f.visitor.received for f in followers) - received
        free_lag = lags(presenter, followers, 1, presenter.steps())
        print(line("presenter's step time, followed", followed), flush=True)
        print(f"presenter's run at the free pace, followed: {followed_run:.2f} s "
              f"({(followed_run / alone_run - 1) * 100:+.1f} % against alone), server CPU {followed_cpu:.2f} s "
              f"({(followed_cpu / alone_cpu - 1) * 100:+.1f} %)", flush=True)
        if followers:
            print(f"written to the {len(followers)} protocol followers during that run: {received / 2**20:.2f} MiB "
                  f"({received / len(followers) / max(1, presenter.steps()) / 1024:.2f} KiB a follower and step; "
                  f"{'whole values' if args.whole_values else 'edits, as to a browser'})", flush=True)
        print(line("followers' lag behind the presenter, step by step", lag), flush=True)
        print(line("followers' lag behind the presenter, free pace", free_lag), flush=True)
        if args.pairs:
            paired_runs(presenter, followers, run_args(prompt, target, args.tokens), memory.proc, args.pairs)

        memory.mark("class")
        stop_paused = threading.Event()
        paused = [threading.Thread(target=paused_run, args=(url, deps, run_args(prompt, target, args.student_tokens),
                                                            stop_paused, errors), daemon=True)
                  for _ in range(args.paused)]
        for thread in paused:
            thread.start()
        time.sleep(3)
        firsts: list[float] = []
        students = [threading.Thread(target=student_run,
                                     args=(url, deps, run_args(prompt, target, args.student_tokens, "baseline"),
                                           firsts, errors), daemon=True) for _ in range(args.students)]
        presenter.start(run_args(prompt, target, args.tokens))
        for thread in students:
            thread.start()
        loaded = step_through(presenter, args.presses)
        for thread in students:
            thread.join(900)
        print(line("presenter's step time, with the class running", loaded), flush=True)
        print(line(f"students' first token ({args.students} at once, {args.student_tokens}-token runs)", firsts),
              flush=True)
        finish(presenter)
        stop_paused.set()
        beat.set()
        for page in pages:
            page.close()
        if chromium is not None:
            chromium_cm.__exit__(None, None, None)
        for f in followers:
            errors += f.errors
        errors += presenter.errors
        memory.mark("end")
        time.sleep(2)
    finally:
        memory.running = False
        stop_app(server)
    print(f"errors: {len(errors)}" + "".join(f"\n  {e}" for e in errors[:10]))
    marks = dict((round(t), what) for t, what in memory.marks)
    series = [f"{t:.0f}s {mb:.0f}MB" + (f" [{marks[round(t)]}]" if round(t) in marks else "")
              for t, mb in memory.samples[:: max(1, len(memory.samples) // 20)]]
    print("server memory: " + ", ".join(series))
    print("server memory at marks: " + ", ".join(
        f"{what} {next((mb for t2, mb in memory.samples if t2 >= t), float('nan')):.0f}MB" for t, what in memory.marks))
    return 1 if errors else 0


def headless_chromium_cm() -> Any:
    """`appserver.headless_chromium` outside pytest (its skip becomes an error)."""
    return headless_chromium()


if __name__ == "__main__":
    sys.exit(main())
