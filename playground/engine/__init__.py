"""The instrumented decoding loop: Transformers' own `generate()`, observed step by step.

We do not re-implement assisted decoding. `generate()` runs in a worker thread; for drafting methods we wrap the
target's `_get_candidate_generator` for the run and patch the two methods of the generator instance it builds (a proxy
object would break the loop, which reads its attributes and checks its class). `get_candidates` shows what was drafted
(and q); `update_candidate_strategy` shows what the target verified and emitted (and p). For baseline a streamer sees
each token and a forward pre-hook on the target marks where each step begins.

Timing: the worker only takes timestamps (after synchronising the model's device on CUDA, so asynchronous kernels are
charged to the phase that launched them) and pushes raw tensors; the caller's thread turns them into token lists,
probabilities (softmax over the vocabulary) and text. The stamps partition `generate()`: setup (until the first step
begins), then per step draft, verify and other (see `trace.Step`), so setup + Σ phases = elapsed.

Its modules, each importing only those listed before it:
  prepared       a run resolved and loaded (`PreparedRun`), `RunError` (its home is `errors`), the names of the assistant's adaptations
  jobs           a long job's stop event per thread (`stopped_by`), `JobStopped` and `GaveWay`, the worker thread
  turns          the turn scheduler (`_Scheduler`: visitors' runs first, the baton passed per step), `exclusive`,
                 `one_turn`; the order model locks are taken in and the draft settings set and restored
  universal      universal decoding with sampling: its dedicated assistant copy and Transformers' translator cache
  logit_ring     the logits a run keeps until its steps get their figures: the budget, a held run's batches, the ring
                 buffer it copies them into
  records        the raw step records the worker hands the consumer, and the phases closed between steps
  distributions  a step's logits to figures: probabilities, p and q, the step microscope's top-k lists (`_digest`)
  stopping       the step boundary on the worker's side (`_Stop`, built whole): stop, time limit, overflowed scores
                 (`_ScoreWatch`), giving way, pace and turns; what follows a step decided purely (`at_boundary`)
  recorder       `_Recorder`, the phases' timestamps and step records, and its patches on the model for one run
  texts          token texts as they read in context, and the text around prompt lookup's source
  sources        where a method's drafts come from, one class per draft source (`DraftSource`, `source_for`): how a
                 run is observed, which assistant it gets, why a step drafted nothing, where a draft was copied from
  preparing      a request checked, its models loaded and its prompt rendered: `prepare`
  steps          the step boundary (`StepBoundary`): a worker's record becomes the trace's next step, committed to
                 the trace, the context and the live summary, its figures filled in
  worker         the generating side of a run (`_Worker`): `generate()` in its thread, attempt after attempt while
                 the run gives way, its records handed to the consumer over one queue (`_RESTART`, then `_DONE`)
  live           one generation as it happens (`LiveRun`, the consumer: its worker's records to steps), `run` to the end (`engine.run` is `LiveRun.run` after
                 `prepare`), `plain_generate` without instrumentation

A held run is one whose steps nobody sees as they come (`LiveRun.held`): they are built once generation has ended.

Callers import the public names from here (`from .engine import prepare`). A name with a leading underscore belongs to
the package: its modules share it, and a test reads or patches it in the module that owns it (patching a name here
changes nothing for the module that uses it).
"""

from ..errors import user_message
from ..models import transformers_once  # noqa: F401  (first: the modules below import Transformers; see there)
from ..request import RunRequest
from .distributions import GRAIN_SIZE, MAX_CANDIDATES, SMALL_ROW, TOP_K_CHUNK
from .jobs import GaveWay, JobStopped, check_stopped, in_worker_thread, redone_after_giving_way, stopped_by
from .live import LiveRun, environment, plain_generate, run
from .logit_ring import HELD_BATCHES
from .prepared import ASSISTANT_ADAPTATIONS, ID_ORDERED_VOCABULARY, PRUNED_BEFORE_SEEDING, PreparedRun, RunError
from .preparing import (
    MAX_TOP_K, MIN_TEMPERATURE, SEED_RANGE, chat_messages, model_facts, prepare, render_prompt, validate_request,
)
from .sources import DraftSource, draft_sources, source_for
from .steps import StepBoundary
from .stopping import non_finite_message
from .texts import LOOKUP_CONTEXT_TOKENS, lookup_text, token_texts
from .turns import (
    exclusive, give_way, model_locks, one_turn, others_waiting, runs_going, turn, visitor_waiting,
)
from .universal import forget_universal_translator
from .worker import WORKER_OS_THREAD_NAME
