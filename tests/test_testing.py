"""tileport.testing: importing it changes nothing; its session hooks set the Triton interpreter and restore it."""

import os
import subprocess
import sys


def test_import_leaves_the_environment_alone():
    code = "import os, tileport.testing; print(os.environ.get('TRITON_INTERPRET'))"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "None"


def test_session_hooks_set_and_restore_the_interpreter(monkeypatch):
    from tileport import testing

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    testing.pytest_configure(None)
    assert os.environ.get("TRITON_INTERPRET") == ("1" if testing.wants_interpreter() else None)
    testing.pytest_unconfigure(None)
    assert "TRITON_INTERPRET" not in os.environ
