"""EAGLE's feature-level draft head: guess the target's next hidden state, let the target's own LM head read it.

A draft model has to rebuild, from tokens alone, everything the target knows about the context. EAGLE (Li et al.
2024, arXiv:2401.15077) drafts one level lower: the target's last hidden state f_t (the feature its LM head turns
into p) already holds that knowledge, and the next feature is far easier to predict than the next token. The head
is one decoder layer. At token position t it reads the feature of the position before and the embedding of the
token there, and predicts the target's feature at t:

    f^_t = layer( fc([f_{t-1} ; e(x_t)]) )          q(x_{t+1}) = softmax(lm_head(f^_t))

`e` and `lm_head` are the target's own (tied in the bundled target), so the head adds one layer and one small
fusion matrix: 2.1 M parameters beside the target's 15.7 M. The token is needed beside the feature because the
target sampled x_t: the feature f_{t-1} says what x_t was likely to be, not which one was drawn.

To guess further the head feeds itself: f^_t stands in for the real f_t at the next position, and so on. Its KV
cache is aligned with the target's (entry t reads token x_t), but only entries built from *real* features are
kept between steps: after verification the target has computed the real features of every accepted token, and the
head's guessed entries are replaced by ones built from them.

A reduced draft vocabulary (EAGLE-3, Li et al. 2025, arXiv:2503.01840, Section 3). On two CPU cores a pass of this
size is bound by reading weights, and the target's LM head (4,096 rows of 384) is as large as the rest of the head.
Most of the target's text is a few tokens: the 1,024 most frequent cover about nine in ten of the tokens it writes.
A head with a `draft_vocab` (V' token ids, saved beside its weights) reads out only those rows of the target's LM
head, so q is a distribution over V' tokens, mapped back to full-vocabulary ids by the table; q is 0 for every
other token, so the head never guesses one, and verification judges each guess by exactly the q it was drawn from:
the output's law does not change, only how often a guess is right (the drafter, `teachspec/speculative/eagle.py`,
says when the reduced q pays: for greedy guesses). No retraining is needed: the reduced LM head is the target's own
rows, and q over them is the full q conditioned on the draft vocabulary.

Lower precision. On a CPU whose oneDNN has bfloat16 kernels (AVX512-BF16 or AMX), `load_head` runs the head in
bfloat16 with its weights packed for them (`lower`): half the bytes to read a pass; its query, key and value
projections then run as one layer, and so do the MLP's gate and up projections (`EagleHead.fuse`). Measured on 2
cores side by side (one thread, the passes interleaved as they are in a step, so the weights do not stay in cache):
a float32 head pass over a 512-token read-out cost 0.97x a draft-model pass (over all 4,096 tokens 1.11x), the
bfloat16 one over 1,024 tokens 0.64x, and fusing took a further sixth off. q is then whatever the bfloat16 head
computes, and every guess is still judged by exactly that q, so the output's law is untouched.

The layer's weights live in a transformers `LlamaModel` (a config and a state dict any Llama tool reads), but its
forward pass is written out below: on these cores transformers' generic forward (mask building, rotary tables,
cache bookkeeping) took as long as the layer's arithmetic, and `test_eagle.py` checks the two agree.

`head_config` sizes the layer from the target's config; `save_head` and `load_head` read and write a folder with
`config.json` (a Llama config of one layer), `model.safetensors` (float16 weights) and, when the head has a draft
vocabulary, `draft_vocab.json` (its token ids, in increasing order). Training is a stage of
`teachspec/tools/train.py` (`--stage eagle`; `--stage draft-vocab` chooses the draft vocabulary of a trained head).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaModel, PreTrainedModel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from teachspec.models.packed import PackedLinear, bf16_pays, pack

INTERMEDIATE = 1024  # the layer's MLP width: the target's is 1536; the head must stay cheap and under 5 MB
# One row times a matrix smaller than this goes to MKL's matrix-vector product, larger ones and several rows to the
# layer itself (oneDNN's packed kernel where `pack` made it one). Measured on 2 cores, one thread, one row: a 1,024 x
# 384 matrix 22 us with MKL against 31 us packed; 2,048 x 384 47 against 49; 4,096 x 384 90 against 87. From three
# rows on the packed kernel wins at every size here (1,024 x 384: 42 us against 86).
ONE_ROW_MKL = 2**20
VOCAB_FILE = "draft_vocab.json"  # beside the weights: the head's draft vocabulary, when it has one


def head_config(target: PreTrainedModel, intermediate: int = INTERMEDIATE) -> LlamaConfig:
    """One Llama decoder layer as wide as the target's features, with the target's heads and rotary positions.
    Its own vocabulary is one row: tokens come in as the target's embeddings, never as ids."""
    t = target.config.get_text_config(decoder=True)
    heads = t.num_attention_heads
    return LlamaConfig(hidden_size=t.hidden_size, intermediate_size=intermediate, num_hidden_layers=1,
                       num_attention_heads=heads, num_key_value_heads=heads, head_dim=t.hidden_size // heads,
                       vocab_size=1, pad_token_id=None, bos_token_id=None, eos_token_id=None,
                       max_position_embeddings=t.max_position_embeddings,
                       rms_norm_eps=getattr(t, "rms_norm_eps", None) or getattr(t, "layer_norm_epsilon", 1e-6),
                       rope_parameters=getattr(t, "rope_parameters", None) or {"rope_type": "default",
                                                                                "rope_theta": 10000.0})


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """layer(x), by the kernel that is faster for its shape (float32: `ONE_ROW_MKL`)."""
    if type(layer) is PackedLinear and x.dtype == torch.float32 and x.numel() == x.shape[-1] \
            and layer.weight.numel() < ONE_ROW_MKL:
        return F.linear(x, layer.weight, layer.bias)
    return layer(x)


def lower(module: nn.Module) -> nn.Module:
    """`module` in bfloat16 with every `nn.Linear` a `PackedLinear`, in place; return it. A lowered module is for
    inference, so its layers do not track in-place edits of their weights (`PackedLinear.track_edits`): a replaced
    weight is packed again, one edited in place is not; reload the head instead."""
    module.to(torch.bfloat16)
    for m in module.modules():
        if type(m) in (nn.Linear, PackedLinear):
            m.__class__ = PackedLinear
            m.packed = None
            m.track_edits = False
    return module


def rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Llama's RMSNorm in one call (transformers' module makes seven)."""
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def check_draft_vocab(draft_vocab, vocab_size: int | None = None, where: str = "") -> torch.Tensor:
    """The table of a reduced draft vocabulary, checked: a 1-D tensor of distinct integer token ids, at least one,
    each in [0, vocab_size) when the vocabulary's size is known. Returned as int64."""
    at = f" ({where})" if where else ""
    if not isinstance(draft_vocab, torch.Tensor) or draft_vocab.dim() != 1 or draft_vocab.is_floating_point() \
            or draft_vocab.is_complex() or draft_vocab.dtype == torch.bool or not len(draft_vocab):
        got = (f"{draft_vocab.dtype} of shape {tuple(draft_vocab.shape)}" if isinstance(draft_vocab, torch.Tensor)
               else f"{type(draft_vocab).__name__} {draft_vocab!r}")
        raise ValueError(f"draft_vocab must be a non-empty 1-D tensor of integer token ids{at}, got {got}")
    draft_vocab = draft_vocab.long()
    low, high = int(draft_vocab.min()), int(draft_vocab.max())
    if low < 0 or (vocab_size is not None and high >= vocab_size):
        bad = low if low < 0 else high
        i = int((draft_vocab == bad).nonzero()[0])
        allowed = f"[0, {vocab_size}), the target's vocabulary" if vocab_size is not None else "ids >= 0"
        raise ValueError(f"draft_vocab must hold token ids in {allowed}{at}; it holds {bad} at position {i}")
    ordered, counts = draft_vocab.unique(return_counts=True)
    if len(ordered) < len(draft_vocab):
        x = int(ordered[counts > 1][0])
        where_x = (draft_vocab == x).nonzero().flatten().tolist()
        raise ValueError(f"draft_vocab must list each token id once{at}; {x} appears at positions {where_x}")
    return draft_vocab


def draft_vocabulary(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The `size` most frequent token ids of `counts` (vocab,), in increasing id order (ties: the smaller id)."""
    if not isinstance(size, int) or not 1 <= size <= len(counts):
        raise ValueError(f"size must be an int in [1, {len(counts)}] (the vocabulary's size), got {size!r}")
    most = torch.sort(-torch.as_tensor(counts, dtype=torch.float64), stable=True).indices[:size]  # ties: smaller id
    return most.sort().values


def coverage(draft_vocab: torch.Tensor, tokens: torch.Tensor) -> float:
    """The share of `tokens` (any shape) that the draft vocabulary holds: the most a greedy first guess can be
    accepted where the target wrote them."""
    inside = torch.zeros(int(max(draft_vocab.max(), tokens.max())) + 1, dtype=torch.bool)
    inside[draft_vocab] = True
    return float(inside[tokens.flatten()].float().mean())


class EagleHead(nn.Module):
    """f^_t = layer(fc([f_{t-1} ; e(x_t)])): `forward` takes the features and the token embeddings, (B, T, H)
    each, and returns the predicted features (B, T, H); `lm_head(target)` turns them into q's logits, over the
    draft vocabulary when the head has one (`draft_vocab`, (V',) token ids; None: the whole vocabulary)."""

    def __init__(self, config: LlamaConfig, draft_vocab: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.layers = LlamaModel(config)  # one decoder layer and a final norm; its one-row embedding goes unused
        # not among the weights: it is saved as a list of ids of its own (`save_head`), as readable as a config
        self.register_buffer("draft_vocab", None if draft_vocab is None else check_draft_vocab(draft_vocab),
                             persistent=False)
        self.__dict__["_read_outs"] = {}  # the LM heads made for a target (`lm_head`): not weights of the head
        self.__dict__["_ids"] = (None, [])  # the draft vocabulary as a list (`vocab_ids`), and what it was made of
        self.__dict__["_rope"] = None  # (cos, sin) of every position: made once, read by index each pass
        self.__dict__["_fused"] = None  # a lowered head's fused projections (`fuse`)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def lowered(self) -> bool:
        """Whether `lower` made the head bfloat16 with packed layers."""
        return type(self.fc) is PackedLinear and self.fc.weight.dtype == torch.bfloat16

    # -- the pass --------------------------------------------------------------------------------------------------

    def rotary(self, position_ids: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin at each position, (B, T, head_dim): rows of a table the layer's own rotary module made once
        for every position (so any rope type the config names works), instead of new trigonometry every pass."""
        table = self._rope
        if table is None or table[0].device != like.device or table[0].dtype != like.dtype:
            with torch.inference_mode(False), torch.no_grad():  # a plain tensor: training may read it later
                every = torch.arange(self.config.max_position_embeddings, device=like.device)[None]
                cos, sin = self.layers.rotary_emb(like, every)  # (1, max positions, head_dim)
            table = self.__dict__["_rope"] = (cos[0], sin[0])
        return table[0][position_ids], table[1][position_ids]

    def fuse(self) -> None:
        """For a lowered head's inference passes (`lower`): the query, key and value projections as one packed
        layer, and the MLP's gate and up projections as another; one call where there were three and two, which
        took a sixth off a one-row pass here (363 to 307 us on one thread: the kernels' fixed cost per call).
        Copies of the weights, made once: a head whose weights are then replaced must be fused again (a lowered
        head is for inference)."""
        layer = self.layers.layers[0]
        attn, mlp = layer.self_attn, layer.mlp
        if not self.lowered or attn.k_proj.out_features != attn.q_proj.out_features:
            return  # not lowered, or grouped-query attention (`head_config` makes none): the separate layers
        made = []
        for group in ((attn.q_proj, attn.k_proj, attn.v_proj), (mlp.gate_proj, mlp.up_proj)):
            both = nn.Linear(group[0].in_features, sum(m.out_features for m in group), bias=False,
                             device=self.device, dtype=self.fc.weight.dtype)
            with torch.no_grad():
                both.weight.copy_(torch.cat([m.weight for m in group]))
            made.append(lower(both.requires_grad_(False)))
        self.__dict__["_fused"] = tuple(made)

    def forward(self, features: torch.Tensor, embeds: torch.Tensor, position_ids: torch.Tensor, cache=None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """One pass, in the head's own dtype, reading and returning features in the target's. `cache`: a
        transformers cache (`kv.new_cache(head.layers)`) the new entries are appended to.
        `attention_mask`: a (B or 1, 1, T, keys) float mask to add to the scores (0 allowed, very negative not),
        as transformers takes one (a tree's: `kv.tree_mask`); None: causal over the new entries, every cached
        entry visible."""
        layer = self.layers.layers[0]
        attn, mlp = layer.self_attn, layer.mlp
        b, t, _ = features.shape
        dtype = self.fc.weight.dtype  # the target's features may be wider: a bfloat16 head reads them rounded
        x = linear(self.fc, torch.cat([features.to(dtype), embeds.to(dtype)], dim=-1))  # (B, T, H)

        fused = None if torch.is_grad_enabled() else self._fused
        h = rms_norm(layer.input_layernorm, x)
        shape = (b, t, -1, attn.head_dim)
        if fused is not None:  # (3, B, heads, T, head_dim) -> q, k, v: the head has as many kv heads as heads
            q, k, v = linear(fused[0], h).view(b, t, 3, -1, attn.head_dim).permute(2, 0, 3, 1, 4)
        else:
            q = linear(attn.q_proj, h).view(shape).transpose(1, 2)  # (B, heads, T, head_dim)
            k = linear(attn.k_proj, h).view(shape).transpose(1, 2)  # (B, kv heads, T, head_dim)
            v = linear(attn.v_proj, h).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *self.rotary(position_ids, x))
        if cache is not None:
            k, v = cache.update(k, v, 0)  # (B, kv heads, keys, head_dim): the cached entries, then these
        if k.shape[1] != q.shape[1]:  # grouped-query attention: each key head serves several query heads
            k, v = (z.repeat_interleave(q.shape[1] // z.shape[1], dim=1) for z in (k, v))
        mask = attention_mask
        if mask is None and t > 1:  # causal: new entry i sees every cached entry and new entries 0 .. i
            mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - t)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling)  # (B, heads, T, head_dim)
        x = x + linear(attn.o_proj, a.transpose(1, 2).reshape(b, t, -1))

        h = rms_norm(layer.post_attention_layernorm, x)
        gate, up = linear(fused[1], h).chunk(2, dim=-1) if fused is not None else \
            (linear(mlp.gate_proj, h), linear(mlp.up_proj, h))
        x = x + linear(mlp.down_proj, mlp.act_fn(gate) * up)
        return rms_norm(self.layers.norm, x).to(features.dtype)  # (B, T, H), in the dtype of the features it read

    # -- reading out q -----------------------------------------------------------------------------------------

    def vocab_ids(self, vocab_size: int) -> list[int]:
        """The draft vocabulary as a list (entry i of q is token vocab_ids[i]), checked against a vocabulary of
        `vocab_size` ids; made once, not for every request."""
        key = (self.draft_vocab.data_ptr(), len(self.draft_vocab), vocab_size)
        if self._ids[0] != key:
            check_draft_vocab(self.draft_vocab, vocab_size, "the EAGLE head's, against the pair's vocabulary")
            self.__dict__["_ids"] = (key, self.draft_vocab.tolist())
        return self._ids[1]

    def lm_head(self, target: PreTrainedModel, whole: bool = False) -> nn.Linear:
        """The LM head that turns f^ into q's logits: a copy of the target's rows for the draft vocabulary's
        tokens, (V', H), in the order of `draft_vocab`; with `whole`, or for a head without one, every row. A
        float32 head reads the whole vocabulary through the target's own LM head; otherwise the copy is in the
        head's dtype, packed as its layers are. Made once per target and kept: a draft pass must not gather rows
        again."""
        full = target.get_output_embeddings()
        w, dtype = full.weight, self.fc.weight.dtype
        whole = whole or self.draft_vocab is None
        if whole and dtype == w.dtype:
            return full
        try:
            edits = w._version  # the target's weights edited in place since: a new copy
        except RuntimeError:
            edits = -1  # made in inference mode: no version counter, and no edits outside it
        key = (w.data_ptr(), edits, w.device, dtype, None if whole else self.draft_vocab.data_ptr())
        if key not in self._read_outs:
            index = slice(None) if whole else self.draft_vocab.to(w.device)
            rows = nn.Linear(w.shape[1], w[index].shape[0], bias=full.bias is not None, device=w.device, dtype=dtype)
            with torch.no_grad():
                rows.weight.copy_(w[index])
                if full.bias is not None:
                    rows.bias.copy_(full.bias[index])
            rows.requires_grad_(False)
            if w.device.type == "cpu" and self.lowered:
                lower(rows)
            elif w.device.type == "cpu" and dtype == torch.float32:
                pack(rows)
            if len(self._read_outs) >= 2:
                self._read_outs.clear()  # one target at a time: its draft vocabulary's rows and all of them
            self._read_outs[key] = rows
        return self._read_outs[key]


def save_head(head: EagleHead, folder: Path, card: dict | None = None) -> None:
    """config.json (the layer's Llama config, plus what the head was trained against), float16 weights and, when
    the head has one, its draft vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict() | {"eagle": card or {}}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    weights = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items()}
    save_file(weights, folder / "model.safetensors")
    vocab = folder / VOCAB_FILE
    if head.draft_vocab is not None:
        vocab.write_text(json.dumps({"draft_vocab": head.draft_vocab.tolist()}))
    elif vocab.exists():
        vocab.unlink()  # a head without one reads q over the whole vocabulary


def read_draft_vocab(path: Path, vocab_size: int) -> torch.Tensor:
    """The draft vocabulary in `path` (JSON: {"draft_vocab": [token ids]}), checked against a vocabulary of
    `vocab_size` ids."""
    ids = json.loads(Path(path).read_text()).get("draft_vocab") if path.stat().st_size else None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"draft_vocab must be a list of integer token ids ({path}), got "
                         f"{type(ids).__name__} {str(ids)[:60]}")
    return check_draft_vocab(torch.tensor(ids, dtype=torch.long), vocab_size, f"in {path}")


def load_head(folder: Path, target: PreTrainedModel, lowered: bool | None = None) -> EagleHead:
    """The head saved in `folder`, on the target's device and in its dtype, checked against the target it will
    read: the features must be as wide as the target's hidden state, and a draft vocabulary must hold distinct
    ids of the target's vocabulary. On the CPU in float32 its large layers are packed for oneDNN, and where the
    CPU has bfloat16 kernels (`bf16_pays`) the whole head runs in bfloat16, packed (`lower`); `lowered=False`
    keeps it in float32 (to train it), True lowers it wherever oneDNN is available."""
    config_dict = json.loads((Path(folder) / "config.json").read_text())
    config_dict.pop("eagle", None)
    config = LlamaConfig(**config_dict)
    width = target.config.get_text_config(decoder=True).hidden_size
    if config.hidden_size != width:
        raise ValueError(f"the EAGLE head in {folder} reads features of width {config.hidden_size}, but the target's "
                         f"hidden size is {width}: a head is trained for one target")
    vocab = Path(folder) / VOCAB_FILE
    rows = target.get_output_embeddings().weight.shape[0]
    head = EagleHead(config, read_draft_vocab(vocab, rows) if vocab.exists() else None)
    head.load_state_dict({k: v.float() for k, v in load_file(Path(folder) / "model.safetensors").items()})
    head = head.to(device=target.device, dtype=target.dtype).eval()  # the draft vocabulary stays int64
    if head.device.type == "cpu" and target.dtype == torch.float32:
        if lowered or (lowered is None and bf16_pays()):
            lower(head)
            head.fuse()
        else:
            pack(head)
    return head


def card(folder: Path) -> dict:
    """What the head's config records about its training (acceptance, minutes, tokens) and its draft vocabulary."""
    return json.loads((Path(folder) / "config.json").read_text()).get("eagle", {})
