"""What a node's key depends on: the identity of values, of code, of the files, folders and
environment a node read, and the words for why a key missed.

A node's input hash (built by `engine.keys.NodeSpec`) is the canonical hash of its code
fingerprint, the fields it may read, its effective params and its runtime inputs. Every piece of
that comes from here. The modules form layers; each imports only from the layers below it:

    canonical     canonical JSON and sha256: one spelling per value, refusals naming the field
    codeorigin    where code comes from (user code, stdlib, an installed package, Rewind itself)
    bytecode      the names a code object uses, its text where no source exists
    objectparts   what an object is made of (attributes, slots, copyreg parts), walked bounded
    classfields   the fields a class declares (dataclass, pydantic, attrs) reached by a walk
    dynamicreach  modules a function reaches by name at run time (getattr, importlib)
    modulereads   module attributes a function reads (`prompts.SYSTEM`)
    walk          one traversal from a node's function through everything it reaches
    fingerprint   code fingerprints, and keys of values made of code (`param_hash`)
    filewatch     files and folders a node read while it ran, and whether they changed
    envwatch      environment variables a node read, and whether they changed
    policy        a node's replay policy and its params (what `rewind.action` records)
    reasons       why a visit ran again, in words

This face holds what the engine, the store and the rest of Rewind use; the layers' own helpers
stay in their modules.
"""

from . import envwatch, filewatch
from .canonical import (
    BURR_INTERNAL_PREFIX, canonical_hash, canonical_json, canonical_parts, combine, field_hashes,
    is_internal_key, join_parts, sha256_hex, strip_ignored, to_canonical,
)
from .codeorigin import type_name, version_of
from .fingerprint import changed_units, code_fingerprint, describe_fingerprint, param_hash
from .objectparts import user_objects
from .policy import (
    DETERMINISTIC, SIDE_EFFECT, TIME_BOUND, Policy, class_params, is_expired, keeps_first_output,
    node_params, param_names, params_json, policy_of, runtime_input_names,
)
from .reasons import changed_fields, miss_reason

__all__ = [
    "envwatch", "filewatch", "BURR_INTERNAL_PREFIX", "canonical_hash", "canonical_json",
    "canonical_parts", "combine", "field_hashes", "is_internal_key", "join_parts", "sha256_hex",
    "strip_ignored", "to_canonical", "type_name", "version_of", "changed_units",
    "code_fingerprint", "describe_fingerprint", "param_hash", "user_objects", "DETERMINISTIC",
    "SIDE_EFFECT", "TIME_BOUND", "Policy", "class_params", "is_expired", "keeps_first_output",
    "node_params", "param_names", "params_json", "policy_of", "runtime_input_names",
    "changed_fields", "miss_reason",
]
