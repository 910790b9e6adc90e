"""Capture the activations a small decoder transformer gives row-wise operators: L2's model cases (clause 2).

The model is built from a fixed seed with the shapes of real configurations (hidden size, attention heads,
head size, MLP width of Qwen2.5-0.5B and SmolLM-135M; a 4096-token vocabulary instead of the real ~150k, which
changes no activation's distribution), initialized as those models are before training (linear weights
N(0, 0.02)), norm weights 1 + N(0, 0.1), two layers of pre-norm attention (q and k L2-normalized per head, as
linear-attention models do) and SwiGLU MLP, run in float32 on random tokens; a cross-entropy loss on random
targets gives the gradients. Stored in bfloat16 (what such models train and serve in), 64 tokens per capture,
in ``tileport/cases/models/<config>.pt``; about 2 MB each. Random-initialized weights do not reproduce what
training adds (massive activations in a few channels): these are real shapes and real data flow, not a
trained model's statistics.

Sites (what an operator's spec maps its inputs to): ``hidden`` [tokens, hidden] (each RMSNorm's input),
``hidden_weight`` [hidden] (its weight), ``hidden_grad`` [tokens, hidden] (the gradient at its output);
``qk`` [tokens * (heads + kv_heads), head_dim] (a layer's q and k heads before their L2 norm) and ``qk_grad``.

    python scripts/capture_model_cases.py        # rewrites tileport/cases/models/*.pt

The other capture, a transformers model's shapes: ``--shapes CONFIG [--out DIR]`` runs one training step of
CONFIG's model patched by tileport and writes each operator's calls as a case file for ``tileport verify OP
--cases`` (the same as ``tileport cases --from-model CONFIG``; ``tileport.transformers.cases``).

    python scripts/capture_model_cases.py --shapes qwen3 --out model-cases
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

CONFIGS = {  # from the models' published config.json files
    "qwen2.5-0.5b": dict(hidden=896, heads=14, kv_heads=2, head_dim=64, inter=4864),
    "smollm-135m": dict(hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536),
}
VOCAB, LAYERS, TOKENS, BATCHES, SEED = 4096, 2, 64, 2, 20261203
OUT = Path(__file__).resolve().parent.parent / "tileport" / "cases" / "models"


def _rms(x, w, sites):
    x.retain_grad()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    y.retain_grad()
    sites["hidden"].append((x, y))
    sites["hidden_weight"].append(w)
    return y


def _l2(t, sites):
    t.retain_grad()
    y = t / torch.sqrt(t.pow(2).sum(-1, keepdim=True) + 1e-6)
    y.retain_grad()
    sites["qk"].append((t, y))
    return y


def capture(name: str, c: dict) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED)
    lin = lambda i, o: (torch.randn(i, o, generator=g) * 0.02).requires_grad_()  # noqa: E731
    norm = lambda: (1 + 0.1 * torch.randn(c["hidden"], generator=g)).requires_grad_()  # noqa: E731
    H, nh, kv, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    emb = (torch.randn(VOCAB, H, generator=g) * 0.02).requires_grad_()
    layers = [
        dict(
            n1=norm(),
            q=lin(H, nh * hd),
            k=lin(H, kv * hd),
            v=lin(H, kv * hd),
            o=lin(nh * hd, H),
            n2=norm(),
            gate=lin(H, c["inter"]),
            up=lin(H, c["inter"]),
            down=lin(c["inter"], H),
        )
        for _ in range(LAYERS)
    ]
    final, head = norm(), lin(H, VOCAB)
    out: dict[str, list] = {k: [] for k in ("hidden", "hidden_weight", "hidden_grad", "qk", "qk_grad")}
    for _ in range(BATCHES):
        sites = {"hidden": [], "hidden_weight": [], "qk": []}
        tokens = torch.randint(0, VOCAB, (TOKENS,), generator=g)
        h = emb[tokens]
        for L in layers:
            a = _rms(h, L["n1"], sites)
            q = _l2((a @ L["q"]).view(TOKENS, nh, hd), sites)
            k = _l2((a @ L["k"]).view(TOKENS, kv, hd), sites).repeat_interleave(nh // kv, dim=1)
            v = (a @ L["v"]).view(TOKENS, kv, hd).repeat_interleave(nh // kv, dim=1)
            att = F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=8.0
            )
            h = h + att.transpose(0, 1).reshape(TOKENS, nh * hd) @ L["o"]
            m = _rms(h, L["n2"], sites)
            h = h + (F.silu(m @ L["gate"]) * (m @ L["up"])) @ L["down"]
        logits = _rms(h, final, sites) @ head
        F.cross_entropy(logits, torch.randint(0, VOCAB, (TOKENS,), generator=g)).backward()
        for x, y in sites["hidden"]:
            out["hidden"].append(x.detach())
            out["hidden_grad"].append(y.grad.detach())
        out["hidden_weight"] += [w.detach() for w in sites["hidden_weight"]]
        for (q, qy), (k, ky) in zip(sites["qk"][::2], sites["qk"][1::2]):  # a layer's q and k heads, stacked as rows
            out["qk"].append(torch.cat([q.detach().reshape(-1, hd), k.detach().reshape(-1, hd)]))
            out["qk_grad"].append(torch.cat([qy.grad.detach().reshape(-1, hd), ky.grad.detach().reshape(-1, hd)]))
        for p in [emb, final, head, *(t for L in layers for t in L.values())]:
            p.grad = None
    return {k: torch.stack(v).to(torch.bfloat16) for k, v in out.items()}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shapes",
        metavar="CONFIG",
        help="a transformers model's operator shapes instead (config.json, folder or family)",
    )
    ap.add_argument("--out", default="model-cases", help="with --shapes: the folder for the case files")
    a = ap.parse_args()
    if a.shapes:
        from tileport.transformers.cases import capture as model_shapes

        for path in model_shapes(a.shapes, Path(a.out)):
            print(path)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for name, c in CONFIGS.items():
        pool = capture(name, c)
        path = OUT / f"{name}.pt"
        torch.save({"config": c, "tokens": TOKENS, "seed": SEED, "sites": pool}, path)
        print(path, {k: tuple(v.shape) for k, v in pool.items()}, f"{path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
