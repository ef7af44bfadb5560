#!/usr/bin/env python3
"""Fails when code decides on a status message's text.

What a failure means travels as a typed detail (farcall.v1.ErrorDetail,
core/error_reason.h); the messages of the status contract are for people
and may change. This scans the C++ under client/, server/, device_agents/,
core/ and python/ext/ (tests excepted) for a message handed to a text
test: StartsWith, EndsWith, StrContains, ConsumePrefix, find, compare, or
== and != on it. Logging, copying and truncating a message are fine.

    python3 tests/lint/no_text_decisions.py [ROOT]   # exit 1 on a finding
"""

import pathlib
import re
import sys

DIRS = ("client", "server", "device_agents", "core", "python/ext")
MESSAGE = r"(?:\.|->)(?:error_)?message\(\)"
PATTERNS = [
    re.compile(r"\b(?:StartsWith|EndsWith|StrContains|ConsumePrefix|ConsumeSuffix|"
               r"StartsWithIgnoreCase|EqualsIgnoreCase)\s*\([^;]*" + MESSAGE),
    re.compile(MESSAGE + r"\s*(?:==|!=)"),
    re.compile(r"(?:==|!=)\s*[\w:.>\-()]*" + MESSAGE),
    re.compile(MESSAGE + r"\s*\.\s*(?:find|rfind|compare|starts_with|ends_with|contains)\s*\("),
]


def findings(root: pathlib.Path):
    for d in DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in (".cc", ".h", ".cu") or path.stem.endswith("_test"):
                continue
            # A statement may span lines: join each file's lines, keeping
            # where each starts.
            text = path.read_text(errors="replace")
            for pattern in PATTERNS:
                for m in pattern.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    yield f"{path.relative_to(root)}:{line}: {m.group(0).strip()}"


SAMPLES = {  # each must be found
    "a.cc": 'if (absl::StartsWith(s.error_message(), "x")) {}',
    "b.cc": 'if (absl::StrContains(\n    status.message(), "deadline")) {}',
    "c.cc": 'bool b = st.message() == "gone";',
    "d.cc": 'bool b = "gone" != r->status().message();',
    "e.cc": 'if (s.message().find("UCX") != absl::string_view::npos) {}',
}


def self_test() -> bool:
    """The patterns find each sample, and not a message that is only
    logged or copied."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "client").mkdir()
        for name, code in SAMPLES.items():
            (root / "client" / name).write_text(code + "\n")
        (root / "client" / "fine.cc").write_text(
            'Log(absl::StrCat("failed: ", s.message().substr(0, 512)));\n'
            'std::string m(s.message());\n')
        found = {f.split(":")[0] for f in findings(root)}
    want = {f"client/{n}" for n in SAMPLES}
    if found != want:
        print(f"self-test: found {sorted(found)}, expected {sorted(want)}")
        return False
    return True


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        pathlib.Path(__file__).resolve().parents[2])
    if not self_test():
        return 1
    found = list(findings(root))
    for f in found:
        print(f"decides on a status message's text: {f}")
    if found:
        print("Mark the status with a reason (core/error_reason.h) and decide on ReasonOf.")
        return 1
    print(f"no decision on a status message's text in {', '.join(DIRS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
