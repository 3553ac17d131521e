"""Show the code: a run as a copyable Transformers script and as a `python -m playground run` command.

The script is rendered from a `PreparedRun`, i.e. from the very `generate()` arguments and
draft-length settings the engine uses (`PreparedRun.generate_kwargs`, `.draft_config`,
`.draft_config_model`), so it cannot drift from what the playground runs and it knows nothing
about individual methods: a new method in the registry is shown correctly without changes here.

    view = show_code(prepared)      # or show_code(request): prepares it (loads models via the store)
    view.python                     # standalone script; leaves the generated ids in `new_tokens`
    view.cli                        # python -m playground run --target … (shell-quoted)

The script reproduces the run token for token on the same library versions and hardware
(bfloat16 and GPU kernels may round differently elsewhere); sampling runs are seeded the way the
engine seeds them, immediately before `generate()`. Where the engine adapts the assistant before
the run (`PreparedRun.assistant_adaptations`: universal decoding with sampling), the script does
the same, with the reason: plain `generate()` alone would sample differently. `python -m
playground code TRACE.json` prints the script for a saved trace (`script_for_trace`).
"""

from __future__ import annotations

import json
import shlex
import textwrap
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from .engine import (
    ASSISTANT_ADAPTATIONS, ID_ORDERED_VOCABULARY, PRUNED_BEFORE_SEEDING, PreparedRun, prepare,
)
from .errors import PlaygroundError
from .methods import get_method
from .models import CATALOGUE, STORE, ModelStore, converted_dir
from .models.transformers_once import transformers
from .request import MAX_NEW_TOKENS, RunRequest, default, new_request
from .settings import get_settings
from .trace import Trace

__all__ = [
    "CodeView", "SnippetError", "show_code", "python_snippet", "resolved_request", "cli_args",
    "cli_command", "model_location", "request_from_trace", "script_for_trace",
]


class SnippetError(PlaygroundError):
    """The run holds something a script cannot spell out (should not happen for registry methods)."""


@dataclass(frozen=True)
class CodeView:
    python: str  # the standalone Transformers script
    cli: str  # the equivalent `python -m playground run …` command, shell-quoted


def show_code(run: PreparedRun | RunRequest, store: ModelStore = STORE) -> CodeView:
    """Both views of a run. A `RunRequest` is prepared first (models come from the store)."""
    prepared = run if isinstance(run, PreparedRun) else prepare(run, store)
    return CodeView(python=python_snippet(prepared), cli=cli_command(resolved_request(prepared)))


# --- where a model comes from ---------------------------------------------------------------

CACHE_PLACEHOLDER = "<PLAYGROUND_CACHE_DIR>"  # a public page's script: the cache folder, not the server's path


def _made_with(prepared: PreparedRun) -> str:
    """The script's first facts: the libraries' versions on a local server; a public one does not show its own."""
    where = f"({prepared.precision.device}, {prepared.precision.dtype})."
    if get_settings().public:
        return f"# Made with the transformers and torch of the playground's requirements.txt {where}"
    return f"# Made with transformers=={transformers.__version__}, torch=={torch.__version__.split('+')[0]} {where}"


def model_location(spec: str) -> tuple[str, list[str]]:
    """(what to pass to `from_pretrained`, comment lines) for a catalogue key, Hub id or directory.

    Bundled models load from the playground's safetensors conversion cache; the comment says
    how that directory was produced.
    """
    entry = CATALOGUE.get(spec)
    public = get_settings().public  # a public server's page shows none of its own paths
    if entry is not None and entry.source == "bundled":
        settings = get_settings()
        directory = converted_dir(entry.key, settings).expanduser()
        if public:  # the same folder under the visitor's own PLAYGROUND_CACHE_DIR, not the server's
            directory = Path(CACHE_PLACEHOLDER) / directory.relative_to(settings.cache_dir.expanduser())
        if entry.derived is not None:
            return str(directory), [
                f"{entry.key}: built by the playground from {entry.derived.base}'s conversion "
                f"(python -m playground convert {entry.key}): {entry.description}",
            ]
        assert entry.gguf is not None
        gguf = entry.gguf
        return str(directory), [
            f"{entry.key}: the playground's safetensors conversion of {gguf.filename} (PyPI: {gguf.requirement}),",
            f"made once by from_pretrained(<gguf dir>, gguf_file={gguf.filename!r}, dtype=torch.float32)",
            f"and save_pretrained(); it exists once the playground has loaded {entry.key} (under PLAYGROUND_CACHE_DIR).",
        ]
    if entry is not None and entry.hub_id:
        return entry.hub_id, []
    path = Path(spec).expanduser()
    if not public and path.is_dir():
        return str(path.resolve()), []
    return spec, []  # a Hub id outside the catalogue, or a directory as the visitor wrote it


# --- the Python script ----------------------------------------------------------------------

def _load_lines(var: str, tok_var: str | None, spec: str, dtype: str, device: str) -> list[str]:
    location, comment = model_location(spec)
    bundled = bool(comment)
    options = [f"dtype=torch.{dtype}"]
    if device.startswith("cuda"):
        options.append('device_map="auto"')
    if get_settings().trust_remote_code and not bundled:
        options.append("trust_remote_code=True")
    lines = [f"# {line}" for line in comment]
    lines.append(f"{var} = AutoModelForCausalLM.from_pretrained({location!r}, {', '.join(options)})")
    if tok_var is not None:
        remote = ", trust_remote_code=True" if "trust_remote_code=True" in options else ""
        lines.append(f"{tok_var} = AutoTokenizer.from_pretrained({location!r}{remote})")
    return lines


def _expr(key: str, value: Any, names: list[tuple[Any, str]], used: set[str]) -> str:
    """Python source for one generate() argument."""
    if isinstance(value, torch.Tensor):
        if key in ("input_ids", "attention_mask"):
            return key
        raise SnippetError.keyed("error.snippet.tensor", name=repr(key))
    for obj, name in names:
        if value is obj:
            used.add(name)
            return name
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise SnippetError.keyed("error.snippet.argument", kind=type(value).__name__, name=repr(key))


def python_snippet(prepared: PreparedRun) -> str:
    """A standalone script that makes the same `generate()` call as this prepared run."""
    req, method = prepared.request, prepared.method
    target, assistant = prepared.target, prepared.assistant
    names: list[tuple[Any, str]] = [(target.model, "model"), (target.tokenizer, "tokenizer")]
    # The store hands out one object per model: a target drafting for itself is passed as is.
    self_assisted = assistant is not None and assistant.model is target.model
    if assistant is not None and not self_assisted:
        names += [(assistant.model, "assistant_model"), (assistant.tokenizer, "assistant_tokenizer")]

    used: set[str] = set()
    call = [f"    {key}={_expr(key, value, names, used)}," for key, value in prepared.generate_kwargs.items()]

    owner = next((name for obj, name in names if obj is prepared.draft_config_model), None)
    if prepared.draft_config and owner is None:
        raise SnippetError.keyed("error.snippet.draft_config_owner")

    out: list[str] = [
        # (Nothing like "coding:" may appear in the first two lines: Python would read it as the file's encoding.)
        "# Reproduces a playground run with Transformers alone.",
        _made_with(prepared),
        f"# Method: {method.title} ({method.name}).",
        "import torch",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
    ]
    out += _load_lines("model", "tokenizer", req.target, prepared.precision.dtype, target.device)
    if self_assisted:
        out += ["# The assistant is the target itself: the same model object drafts and verifies."]
    elif assistant is not None:
        tok_var = "assistant_tokenizer" if "assistant_tokenizer" in used else None
        out += [""] + _load_lines("assistant_model", tok_var, req.assistant or assistant.name,
                                  prepared.precision.dtype, assistant.device)

    out += _adaptation_lines(prepared)

    if prepared.draft_config:
        whose = "the target's" if method.draft_config_on_target else "the assistant's"
        out += [
            "",
            f"# Draft length: Transformers reads these from {whose} generation_config;",
            "# passed to generate() they would be silently ignored.",
        ]
        out += [f"{owner}.generation_config.{key} = {value!r}" for key, value in prepared.draft_config.items()]

    out += ["", f"prompt = {req.prompt!r}"]
    if prepared.chat:
        template_args = "".join(f", {key}={value!r}" for key, value in req.chat_template_kwargs.items())
        if req.system:
            out += [f"system = {req.system!r}",
                    'messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]']
        else:
            out.append('messages = [{"role": "user", "content": prompt}]')
        out += [
            f"text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True{template_args})",
            'input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids.to(model.device)',
        ]
    else:
        out.append('input_ids = tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)')
    out.append("attention_mask = torch.ones_like(input_ids)")

    out.append("")
    if req.sample:
        out.append(f"torch.manual_seed({int(req.seed)})  # sampling: seeded right before generate()")
    out += ["output = model.generate(", *call, ")"]
    out += [
        "new_tokens = output[0, input_ids.shape[1]:]",
        "print(tokenizer.decode(new_tokens, skip_special_tokens=True))",
    ]
    return "\n".join(out) + "\n"


# What the engine did to the assistant, in the script's variables (see engine.ASSISTANT_ADAPTATIONS).
_ADAPTATION_CODE = {
    ID_ORDERED_VOCABULARY: [
        "_listed_vocabulary = assistant_tokenizer.get_vocab",
        "assistant_tokenizer.get_vocab = lambda: dict(sorted(_listed_vocabulary().items(), key=lambda item: item[1]))",
    ],
    PRUNED_BEFORE_SEEDING: [
        "from transformers.generation.candidate_generator import AssistantVocabTranslatorCache",
        "",
        "AssistantVocabTranslatorCache.get_translator(",
        "    tokenizer, assistant_tokenizer, model.config.get_text_config().vocab_size,",
        "    assistant_model=assistant_model, assistant_prune_lm_head=True,",
        ")",
    ],
}


def _adaptation_lines(prepared: PreparedRun) -> list[str]:
    """The engine's adaptations of the assistant, each with its reason; refused if one cannot be written."""
    out: list[str] = []
    for name in prepared.assistant_adaptations:
        if name not in _ADAPTATION_CODE:
            raise SnippetError.keyed("error.snippet.adaptation", name=name)
        if not out:
            out += ["", "# The playground adapts the assistant before the run; without these steps plain generate()",
                    "# samples differently."]
        out += [f"# {line}" for line in textwrap.wrap(ASSISTANT_ADAPTATIONS[name] + ".", 100)]
        out += _ADAPTATION_CODE[name]
    return out


# --- a saved trace ---------------------------------------------------------------------------

def request_from_trace(trace: Trace) -> RunRequest:
    """The request that reproduces a trace's run (its resolved chat and precision included); a decoding field of the
    wrong kind (max_new_tokens "9e9") refused in one line (`Trace.check_decoding`)."""
    trace.check_decoding()
    d = trace.decoding
    return new_request(
        trace.prompt, target=trace.target, method=trace.method, assistant=trace.assistant,
        params=dict(trace.params), max_new_tokens=int(d.get("max_new_tokens", trace.summary.new_tokens or MAX_NEW_TOKENS["run"])),
        sample=bool(d.get("sample", default("sample"))), temperature=float(d.get("temperature", default("temperature"))),
        top_p=float(d.get("top_p", default("top_p"))), top_k=int(d.get("top_k", default("top_k"))),
        seed=int(d.get("seed", default("seed"))), chat=trace.chat, dtype=str(trace.env.get("dtype") or default("dtype")),
        system=trace.system,
        chat_template_kwargs=dict(trace.chat_template_kwargs),
    )


def script_for_trace(trace: Trace, store: ModelStore = STORE) -> str:
    """The Python script that reproduces a saved trace's run (its models are loaded to resolve the call)."""
    return python_snippet(prepare(request_from_trace(trace), store))


# --- the CLI command ------------------------------------------------------------------------

def resolved_request(prepared: PreparedRun) -> RunRequest:
    """The request with every choice the engine made spelled out: all parameters, chat, dtype."""
    return replace(
        prepared.request, params=dict(prepared.params), chat=prepared.chat,
        dtype=prepared.precision.dtype,
    )


# RunRequest field -> option of `python -m playground run` (see cli.add_run_arguments).
_OPTIONS = {
    "target": "--target", "assistant": "--assistant", "method": "--method", "params": "--set",
    "max_new_tokens": "--max-new-tokens", "sample": "--sample", "temperature": "--temperature",
    "top_p": "--top-p", "top_k": "--top-k", "seed": "--seed", "chat": "--chat", "dtype": "--dtype",
    "prompt": "--prompt", "system": "--system", "chat_template_kwargs": "--chat-template-kwarg",
}
_ALWAYS = ("target", "method", "prompt")


def _cli_defaults() -> dict[str, Any]:
    """What `python -m playground run` assumes for an option left out: RunRequest's defaults (a test pins the
    parser's defaults to them)."""
    return {f.name: default(f.name) for f in fields(RunRequest) if f.default is not MISSING}


def _cli_value(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def cli_args(request: RunRequest) -> list[str]:
    """Arguments after `python -m playground run` that parse back to this request.

    Target and method are always given; other options only where they differ from the
    parser's defaults; method parameters as `--set NAME=VALUE`, in the request's order.
    """
    get_method(request.method).resolve_params(request.params)  # refuse what the CLI would refuse
    defaults = _cli_defaults()
    args: list[str] = []
    for field, option in _OPTIONS.items():
        value = getattr(request, field)
        if field == "params":
            for name, param_value in value.items():
                args += [option, f"{name}={_cli_value(param_value)}"]
        elif field == "chat_template_kwargs":
            for name, template_value in value.items():
                args += [option, f"{name}={json.dumps(template_value)}"]
        elif field == "sample":
            args += [option] if value else []
        elif field == "chat":
            args += [] if value is None else ["--chat" if value else "--no-chat"]
        elif value is not None and (field in _ALWAYS or value != defaults[field]):
            args += [option, _cli_value(value)]
    return args


def cli_command(request: RunRequest) -> str:
    """`python -m playground run …` for this request, each argument quoted with `shlex.quote`."""
    return " ".join(["python", "-m", "playground", "run", *map(shlex.quote, cli_args(request))])
