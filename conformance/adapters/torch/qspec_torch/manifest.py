"""The manifest of a program case (spec/cases.md [CASE-GEN-PROG]) and the adapter's refusal."""

import json
import os


class NotSupported(Exception):
    """A case (or a variant of it) this framework cannot express; str() is the reason."""


def load_manifest(workdir):
    with open(os.path.join(workdir, "manifest.json")) as f:
        m = json.load(f)
    if m.get("kit") != "qspec":
        raise ValueError(f"{workdir}/manifest.json: not a qspec manifest")
    if m.get("op") != "program":
        raise NotSupported(f"the torch adapter answers program cases; this is a {m.get('op')} case")
    return m


def statement(st):
    """(kind, fields) of a statement {KIND: {fields}}."""
    if not isinstance(st, dict) or len(st) != 1:
        raise ValueError(f"a statement is a one-key object, got {st!r}")
    ((kind, fields),) = st.items()
    return kind, fields
