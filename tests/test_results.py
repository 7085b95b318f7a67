"""Env-record provenance: the sources' digest ties a record to the code that ran, whatever git_commit says."""
import json
import shutil
import subprocess

import pytest

from artifact.results import main, source_digest, source_digest_at, verify_env

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(root, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A tiny repository with the project's source layout: two commits that differ in one kernel file."""
    for d, text in (("artifact", "A = 1\n"), ("kernels", "K = 1\n"), ("baselines", ""), ("sweeps", "")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "m.py").write_text(text)
    (tmp_path / "notes.md").write_text("not a source\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "one")
    first = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "kernels" / "m.py").write_text("K = 2\n")
    _git(tmp_path, "commit", "-qam", "two")
    return tmp_path, first, _git(tmp_path, "rev-parse", "HEAD")


def test_source_digest_names_the_commit_that_ran(repo):
    """The working tree's digest equals its commit's and no other's; editing a source, or adding one, changes
    it; a file outside the source folders does not."""
    root, first, second = repo
    here = source_digest(root)
    assert here == source_digest_at(second, root) != source_digest_at(first, root)
    (root / "notes.md").write_text("edited\n")
    assert source_digest(root) == here
    (root / "sweeps" / "new.py").write_text("")
    assert source_digest(root) != here


def test_verify_env_catches_a_mistyped_commit(repo, tmp_path):
    """A record whose git_commit is another commit (as a mistyped ONELA_GIT_COMMIT gives) is a MISMATCH and
    the command exits 1; the right commit verifies; an old record without a digest is reported unchecked."""
    root, first, second = repo
    digest = source_digest(root)
    right, wrong, old = tmp_path / "right.json", tmp_path / "wrong.json", tmp_path / "old.json"
    right.write_text(json.dumps({"git_commit": second, "source_sha256": digest}))
    wrong.write_text(json.dumps({"git_commit": first, "source_sha256": digest}))
    old.write_text(json.dumps({"git_commit": second}))
    assert verify_env(right, root)[0] is True
    ok, msg = verify_env(wrong, root)
    assert ok is False and first[:12] in msg
    assert verify_env(old, root)[0] is None
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"git_commit": "f" * 40, "source_sha256": digest}))
    assert verify_env(missing, root)[0] is None          # a commit this clone does not have: not a verdict
    side = tmp_path / "run.traffic.json"                  # a run's side file: no commit of its own
    side.write_text(json.dumps({"copy_bytes": 1}))
    assert verify_env(side, root) == (None, "a side file of its run's env record, which carries the commit")


def test_env_record_carries_the_digest_and_the_command_checks_it(tmp_path, capsys, monkeypatch):
    """This repository's own env record has the digest of the tree on disk, and `verify` passes it on a clean
    checkout (CI's clone); a checkout with local edits may legitimately mismatch."""
    from artifact.results import write_env
    monkeypatch.delenv("ONELA_GIT_COMMIT", raising=False)
    rec = write_env(tmp_path / "env.json")
    assert rec["source_sha256"] == source_digest()
    code = main(["verify", str(tmp_path / "env.json")])
    if not rec["git_commit"].endswith("+dirty"):
        assert code == 0, capsys.readouterr().out
    assert "env.json" in capsys.readouterr().out
    assert main([]) == 2
