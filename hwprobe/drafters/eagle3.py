"""An EAGLE-3 draft head (Li et al., 2025) loaded from a local directory.

Expected directory layout (the SafeAILab / RedHatAI EAGLE-3 checkpoints)::

    config.json          hidden_size, num_attention_heads, num_key_value_heads,
                         intermediate_size, vocab_size (target), draft_vocab_size,
                         rms_norm_eps, rope_theta (or rope_parameters.rope_theta),
                         optional head_dim, target_hidden_size
    model.safetensors    (or pytorch_model.bin) with the tensors
        fc.weight                               [H, 3·Ht]  fuses target layers
        midlayer.hidden_norm.weight             [H]
        midlayer.input_layernorm.weight         [H]
        midlayer.self_attn.{q,k,v}_proj.weight  [heads·hd, 2H]  (input: [embed; hidden])
        midlayer.self_attn.o_proj.weight        [H, heads·hd]
        midlayer.post_attention_layernorm.weight[H]
        midlayer.mlp.{gate,up}_proj.weight      [I, H];  midlayer.mlp.down_proj.weight [H, I]
        norm.weight                             [H]
        lm_head.weight                          [draft_vocab, H]
        d2t                                     [draft_vocab]  target id = draft id + d2t[id]
        embed_tokens.weight (optional)          else the target's input embedding is used

Features: the target's hidden states entering layers 2, L/2 and L−3
(``hidden_states[i]`` of a transformers forward; clamped to ``[0, L]`` for
tiny models) concatenated and fused by ``fc``.  Row j of the head pairs the
feature of context token j with the embedding of token j+1 and predicts
token j+2; a tree node's row pairs its parent row's head output with its own
token's embedding.  Prefix rows are cached (K/V); each level recomputes only
the pool's rows.  Cost per level: one single-layer pass over ``|pool|`` rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from hwprobe.cli import HwprobeError
from hwprobe.drafters.base import Drafter
from hwprobe.tree import ancestor_matrix


def _rms(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def feature_layers(num_layers: int) -> list[int]:
    """Indices into ``hidden_states`` (0 = embeddings) of the low, middle and high features."""
    return [min(max(i, 0), num_layers) for i in (2, num_layers // 2, num_layers - 3)]


class Eagle3Head(nn.Module):
    """The single-layer EAGLE-3 head; parameter names follow the checkpoint layout above."""

    def __init__(self, cfg: dict):
        super().__init__()
        H = int(cfg["hidden_size"])
        Ht = int(cfg.get("target_hidden_size") or H)
        self.nh = int(cfg["num_attention_heads"])
        self.nkv = int(cfg.get("num_key_value_heads") or self.nh)
        self.hd = int(cfg.get("head_dim") or H // self.nh)
        inter = int(cfg["intermediate_size"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        rp = cfg.get("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        dv = int(cfg.get("draft_vocab_size") or cfg["vocab_size"])
        self.fc = nn.Linear(3 * Ht, H, bias=False)
        self.midlayer = nn.Module()
        m = self.midlayer
        m.hidden_norm = nn.Module()
        m.hidden_norm.weight = nn.Parameter(torch.ones(H))
        m.input_layernorm = nn.Module()
        m.input_layernorm.weight = nn.Parameter(torch.ones(H))
        m.post_attention_layernorm = nn.Module()
        m.post_attention_layernorm.weight = nn.Parameter(torch.ones(H))
        m.self_attn = nn.Module()
        m.self_attn.q_proj = nn.Linear(2 * H, self.nh * self.hd, bias=False)
        m.self_attn.k_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        m.self_attn.v_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        m.self_attn.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        m.mlp = nn.Module()
        m.mlp.gate_proj = nn.Linear(H, inter, bias=False)
        m.mlp.up_proj = nn.Linear(H, inter, bias=False)
        m.mlp.down_proj = nn.Linear(inter, H, bias=False)
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(H))
        self.lm_head = nn.Linear(H, dv, bias=False)
        self.register_buffer("d2t", torch.zeros(dv, dtype=torch.long))

    def _rope(self, x, pos):
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, device=x.device).float() / self.hd))
        f = pos.float()[:, None] * inv[None]
        emb = torch.cat([f, f], -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def step(self, hidden, embeds, pos, past_k, past_v, allowed):
        """Rows ``[T, H]`` at positions ``pos``; ``allowed [T, P + T]`` over cached + new rows.

        Returns (head output hidden ``[T, H]``, new K, new V).
        """
        m = self.midlayer
        x = torch.cat([_rms(embeds, m.input_layernorm.weight, self.eps),
                       _rms(hidden, m.hidden_norm.weight, self.eps)], -1)
        T = x.shape[0]
        q = m.self_attn.q_proj(x).view(T, self.nh, self.hd)
        k = m.self_attn.k_proj(x).view(T, self.nkv, self.hd)
        v = m.self_attn.v_proj(x).view(T, self.nkv, self.hd)
        q, k = self._rope(q.transpose(0, 1), pos), self._rope(k.transpose(0, 1), pos)
        v = v.transpose(0, 1)
        K = torch.cat([past_k, k], 1) if past_k is not None else k
        V = torch.cat([past_v, v], 1) if past_v is not None else v
        rep = self.nh // self.nkv
        att = torch.nn.functional.scaled_dot_product_attention(
            q[None], K.repeat_interleave(rep, 0)[None], V.repeat_interleave(rep, 0)[None],
            attn_mask=allowed[None, None])[0]
        h = hidden + m.self_attn.o_proj(att.transpose(0, 1).reshape(T, -1))
        h2 = _rms(h, m.post_attention_layernorm.weight, self.eps)
        h = h + m.mlp.down_proj(nn.functional.silu(m.mlp.gate_proj(h2)) * m.mlp.up_proj(h2))
        return h, k, v

    def logits(self, h):
        return self.lm_head(_rms(h, self.norm.weight, self.eps))


def save_head(head: Eagle3Head, cfg: dict, path: Path) -> None:
    """Write a head in the layout above (used by tests with random weights)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(path / "model.safetensors"))


class Eagle3Drafter(Drafter):
    """EAGLE-3 drafting; needs the target's hidden states of committed tokens (``observe``)."""

    name = "eagle3"
    needs_features = True

    def __init__(self, head: Eagle3Head, target):
        self.head = head.eval()
        self.target = target
        self.layers = feature_layers(target.config.num_hidden_layers)
        emb = target.get_input_embeddings()
        self.embed = getattr(head, "embed_tokens", None) or emb
        self.start([])

    @classmethod
    def from_dir(cls, path, *, target, device=None):
        if path is None:
            raise HwprobeError("the eagle3 drafter needs --drafter-dir DIR")
        path = Path(path)
        if not (path / "config.json").is_file():
            raise HwprobeError(f"{path}: no config.json (EAGLE-3 head directory expected)")
        cfg = json.loads((path / "config.json").read_text())
        missing = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size") if k not in cfg]
        if missing:
            raise HwprobeError(f"{path / 'config.json'}: missing {', '.join(missing)}")
        if (path / "model.safetensors").is_file():
            from safetensors.torch import load_file
            state = load_file(str(path / "model.safetensors"))
        elif (path / "pytorch_model.bin").is_file():
            state = torch.load(str(path / "pytorch_model.bin"), map_location="cpu", weights_only=True)
        else:
            raise HwprobeError(f"{path}: no model.safetensors or pytorch_model.bin")
        head = Eagle3Head(cfg)
        embed = state.pop("embed_tokens.weight", None)
        state = {k: v for k, v in state.items() if k != "t2d"}
        try:
            head.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise HwprobeError(f"{path}: weights do not match the EAGLE-3 layout: {str(exc)[:300]}") from None
        dtype = next(target.parameters()).dtype
        head.to(device=device or next(target.parameters()).device, dtype=dtype)
        if embed is not None:
            head.embed_tokens = nn.Embedding.from_pretrained(embed.to(head.lm_head.weight))
        return cls(head, target)

    # -- state -----------------------------------------------------------------
    def start(self, prompt):
        self.features: list[torch.Tensor] = []    # fused target feature per committed context token
        self.k = self.v = None                    # head K/V of the cached prefix rows
        self.rows = 0                             # head rows cached
        self.last_hidden = None                   # head output of the newest cached row

    def target_features(self, target_output, rows) -> torch.Tensor:
        """Fused features ``[len(rows), H]`` of the given rows of a target forward."""
        hs = target_output.hidden_states
        cat = torch.cat([hs[i][0].index_select(0, rows) for i in self.layers], -1)
        return self.head.fc(cat.to(self.head.fc.weight.dtype))

    def observe(self, context, target_output=None, rows=None):
        """Append the features of newly committed tokens (``rows`` of ``target_output``)."""
        if target_output is None:
            return
        dev = self.head.fc.weight.device
        if rows is None:
            rows = torch.arange(target_output.hidden_states[0].shape[1], device=dev)
        rows = torch.as_tensor(rows, device=target_output.hidden_states[0].device)
        with torch.no_grad():
            f = self.target_features(target_output, rows)
        self.features.extend(f.unbind(0))

    def _sync(self, context) -> None:
        """Cache head rows 0 .. n-1, where the context is tokens 0 .. n (token n = the root)."""
        n = len(context) - 1
        if len(self.features) < n:
            raise HwprobeError("EAGLE-3 drafter is missing target features for the context")
        if self.rows >= n:
            return
        dev = self.head.fc.weight.device
        new = range(self.rows, n)
        hidden = torch.stack([self.features[j] for j in new])
        embeds = self.embed(torch.as_tensor([context[j + 1] for j in new], device=dev))
        pos = torch.as_tensor(list(new), device=dev)
        T, P = len(new), self.rows
        allowed = torch.ones((T, P + T), dtype=torch.bool, device=dev)
        allowed[:, P:] = torch.tril(allowed[:, P:])
        h, k, v = self.head.step(hidden, embeds, pos, self.k, self.v, allowed)
        self.k = k if self.k is None else torch.cat([self.k, k], 1)
        self.v = v if self.v is None else torch.cat([self.v, v], 1)
        self.rows, self.last_hidden = n, h[-1]

    def children(self, context, pool, frontier, k):
        with torch.no_grad():
            self._sync(context)
            rows_h = {-1: self.last_hidden}
            if len(pool):
                # pool rows: parent row's head output with the node's own token embedding
                dev = self.last_hidden.device
                m = len(pool)
                outs: list = [None] * m
                A = torch.as_tensor(ancestor_matrix(pool.parent)[1:, 1:], device=dev)
                by_level: dict[int, list[int]] = {}
                for j, lv in enumerate(pool.level):
                    by_level.setdefault(lv, []).append(j)
                n = len(context) - 1
                for lv in sorted(by_level):   # a node's input needs its parent's output
                    idx = by_level[lv]
                    hidden = torch.stack([rows_h[pool.parent[j]] if pool.parent[j] < 0 else outs[pool.parent[j]]
                                          for j in idx])
                    ids = [j for j in range(m) if pool.level[j] < lv] + idx
                    emb = self.embed(torch.as_tensor([pool.token[j] for j in ids], device=dev))
                    hid_all = torch.stack([rows_h[-1] if pool.parent[j] < 0 else outs[pool.parent[j]]
                                           for j in ids[: len(ids) - len(idx)]] + list(hidden.unbind(0))) \
                        if len(ids) > len(idx) else hidden
                    pos = torch.as_tensor([n - 1 + pool.level[j] for j in ids], device=dev)
                    sub = A[ids][:, ids]
                    allowed = torch.cat([torch.ones((len(ids), self.rows), dtype=torch.bool, device=dev), sub], 1)
                    h, _, _ = self.head.step(hid_all, emb, pos, self.k, self.v, allowed)
                    for r, j in enumerate(ids):
                        if pool.level[j] == lv:
                            outs[j] = h[r]
                for j in range(m):
                    rows_h[j] = outs[j]
            h = torch.stack([rows_h[f] for f in frontier])
            probs = torch.softmax(self.head.logits(h).float(), -1)
            top = torch.topk(probs, k, -1)
            tgt = top.indices + self.head.d2t[top.indices]
        return [(tgt[i].tolist(), top.values[i].tolist()) for i in range(len(frontier))]
