"""Which early-exit layer teaches on a model: how often a draft from the first N layers would be right, per layer.

Early exit drafts with the target's own first N layers, its final norm and its LM head (Transformers lowers
`config.num_hidden_layers` to N while drafting). Over the context those N layers compute exactly what the target's
first N layers compute, so the first token a step drafts at position i is `lm_head(norm(h_N[i]))`: one forward pass
of the target with its hidden states gives every layer's first draft at every position of a run at once.

* greedy: the share of positions where that draft's argmax is the target's greedy token (the first draft of a step
  is accepted exactly when it is);
* sampling (temperature 1, no top-k / top-p): Σ min(p, q_N), the chance that rejection sampling keeps the first
  draft token at a position (1 − total variation distance).

Later tokens of a draft also depend on earlier drafts, so a run's acceptance is lower than this first-token figure;
the runs that pick the registry's default (`python -m playground run --method early_exit ...`) are quoted in the
catalogue beside the chosen layer. Not a test: a measurement, run by hand.

    python tests/measure/early_exit_layers.py [--target bundled/gemma-3-270m] [--dtype float32] [--tokens 48] [--examples A,B]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from playground.engine import plain_generate, prepare  # noqa: E402
from playground.examples import EXAMPLES  # noqa: E402
from playground.request import new_request  # noqa: E402


def per_layer(target: str, dtype: str, prompt: str, tokens: int) -> tuple[list[float], list[float], int]:
    """(greedy first-draft agreement, sampling first-draft acceptance) per exit layer 1 … layers − 1, and the number
    of positions they average over, on the target's greedy continuation of `prompt`."""
    prepared = prepare(new_request(prompt, target=target, method="baseline", dtype=dtype, max_new_tokens=tokens))
    output, _ = plain_generate(prepared)
    model = prepared.target.model
    ids = torch.cat([prepared.input_ids, torch.tensor([output], dtype=prepared.input_ids.dtype)], dim=1)
    start = prepared.input_ids.shape[1] - 1  # the logits at start … end − 1 predict the generated tokens
    with torch.inference_mode():
        out = model(input_ids=ids.to(prepared.target.device), output_hidden_states=True)
        p = torch.softmax(out.logits[0, start:-1].float(), dim=-1)
        chosen = ids[0, start + 1:].to(p.device)
        layers = prepared.target.num_layers
        greedy, sampled = [], []
        for n in range(1, layers):
            hidden = model.model.norm(out.hidden_states[n][:, start:-1])
            logits = model.lm_head(hidden)[0].float()
            cap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
            if cap:
                logits = torch.tanh(logits / cap) * cap
            q = torch.softmax(logits, dim=-1)
            greedy.append((logits.argmax(-1) == chosen).float().mean().item())
            sampled.append(torch.minimum(p, q).sum(-1).mean().item())
    return greedy, sampled, len(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="bundled/gemma-3-270m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.examples.split(",") if name.strip()]
    rows: dict[str, tuple[list[float], list[float]]] = {}
    for example in (e for e in EXAMPLES if not chosen or e.name in chosen):
        greedy, sampled, n = per_layer(args.target, args.dtype, example.text, args.tokens)
        rows[example.name] = (greedy, sampled)
        print(f"{example.name}: {n} positions", flush=True)
    layers = len(next(iter(rows.values()))[0])
    print(f"\nfirst-draft acceptance per exit layer, {args.target}, {args.dtype} (greedy | sampling at T = 1)")
    print("layer  " + "  ".join(f"{name[:12]:>12}" for name in rows) + "        mean")
    for i in range(layers):
        greedy = [rows[name][0][i] for name in rows]
        sampled = [rows[name][1][i] for name in rows]
        cells = "  ".join(f"{g:5.0%}|{s:5.0%}" for g, s in zip(greedy, sampled))
        print(f"{i + 1:5d}  {cells}  {sum(greedy) / len(greedy):5.0%}|{sum(sampled) / len(sampled):5.0%}")


if __name__ == "__main__":
    main()
