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

`head_config` sizes the layer from the target's config; `save_head` and `load_head` read and write a folder with
`config.json` (a Llama config of one layer) and `model.safetensors` (float16). Training is a stage of
`teachspec/models/train.py` (`--stage eagle`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaModel, PreTrainedModel

from teachspec.kv import cache_keyword
from teachspec.models.packed import pack

INTERMEDIATE = 1024  # the layer's MLP width: the target's is 1536; the head must stay cheap and under 5 MB


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


class EagleHead(nn.Module):
    """f^_t = layer(fc([f_{t-1} ; e(x_t)])): `forward` takes the features and the token embeddings, (B, T, H)
    each, and returns the predicted features (B, T, H); the caller turns them into q with the target's LM head."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.layers = LlamaModel(config)  # one decoder layer and a final norm; its one-row embedding goes unused

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def forward(self, features: torch.Tensor, embeds: torch.Tensor, position_ids: torch.Tensor, cache=None,
                attention_mask=None) -> torch.Tensor:
        x = self.fc(torch.cat([features, embeds], dim=-1))
        out = self.layers(inputs_embeds=x, position_ids=position_ids, attention_mask=attention_mask,
                          use_cache=cache is not None, **{cache_keyword(type(self.layers)): cache})
        return out.last_hidden_state


def save_head(head: EagleHead, folder: Path, card: dict | None = None) -> None:
    """config.json (the layer's Llama config, plus what the head was trained against) and float16 weights."""
    folder.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict() | {"eagle": card or {}}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    weights = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items()}
    save_file(weights, folder / "model.safetensors")


def load_head(folder: Path, target: PreTrainedModel) -> EagleHead:
    """The head saved in `folder`, on the target's device and in its dtype, checked against the target it will
    read: the features must be as wide as the target's hidden state."""
    config_dict = json.loads((Path(folder) / "config.json").read_text())
    config_dict.pop("eagle", None)
    config = LlamaConfig(**config_dict)
    width = target.config.get_text_config(decoder=True).hidden_size
    if config.hidden_size != width:
        raise ValueError(f"the EAGLE head in {folder} reads features of width {config.hidden_size}, but the target's "
                         f"hidden size is {width}: a head is trained for one target")
    head = EagleHead(config)
    head.load_state_dict({k: v.float() for k, v in load_file(Path(folder) / "model.safetensors").items()})
    head = head.to(device=target.device, dtype=target.dtype).eval()
    if head.device.type == "cpu" and target.dtype == torch.float32:
        pack(head)
    return head


def card(folder: Path) -> dict:
    """What the head's config records about its training (acceptance, minutes, tokens)."""
    return json.loads((Path(folder) / "config.json").read_text()).get("eagle", {})
