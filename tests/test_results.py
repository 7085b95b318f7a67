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
    """A record whose git_commit is another commit (as a mistyped ONELA_GIT_COMMIT gives) is a MISMATCH; the right
    commit verifies; an old record without a digest, or one naming a commit this clone lacks, is unchecked; a side
    file is judged by its record's presence."""
    root, first, second = repo
    digest = source_digest(root)
    right, wrong, old = tmp_path / "right.json", tmp_path / "wrong.json", tmp_path / "old.json"
    right.write_text(json.dumps({"git_commit": second, "source_sha256": digest}))
    wrong.write_text(json.dumps({"git_commit": first, "source_sha256": digest}))
    old.write_text(json.dumps({"git_commit": second}))
    assert verify_env(right, root)[0] == "ok"
    verdict, msg = verify_env(wrong, root)
    assert verdict == "MISMATCH" and first[:12] in msg
    assert verify_env(old, root)[0] == "unchecked"
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"git_commit": "f" * 40, "source_sha256": digest}))
    assert verify_env(missing, root)[0] == "unchecked"    # a commit this clone does not have: not a verdict
    side = tmp_path / "right.traffic.json"                # a run's side file: no commit of its own
    side.write_text(json.dumps({"copy_bytes": 1}))
    assert verify_env(side, root)[0] == "side"
    orphan = tmp_path / "gone.wall.json"
    orphan.write_text(json.dumps({"wall_s": 1}))
    assert verify_env(orphan, root) == ("ORPHAN", "a side file whose env record gone.json is not beside it")


def test_verify_fails_what_it_cannot_verify_and_checks_every_file(tmp_path, capsys):
    """An unchecked record (no digest; a fake, unknown or removed commit) fails unless --allow-unchecked; an
    unreadable one (the 0-byte .wall.json a full disk leaves, cut-short JSON) fails and the files after it are
    still checked; bad usage exits 2."""
    env = tmp_path / "env"
    env.mkdir()
    (env / "run-a.json").write_text(json.dumps({"git_commit": "fake", "source_sha256": "0" * 64}))
    (env / "run-a.wall.json").write_text("")                                 # a full disk's 0-byte side file
    (env / "run-b.json").write_text(json.dumps({"git_commit": "unknown"}))
    (env / "run-c.json").write_text('{"git_commit": "abc')                   # cut short
    (env / "run-d.json").write_text(json.dumps({"git_commit": "f" * 40, "source_sha256": "0" * 64}))
    files = sorted(str(f) for f in env.iterdir())
    assert main(["verify", *files]) == 1
    out = capsys.readouterr().out
    assert out.count("unchecked  ") == 3 and out.count("UNREADABLE  ") == 2
    assert f"UNREADABLE  {env / 'run-a.wall.json'}: JSONDecodeError" in out
    assert "not in this clone" in out and "pass --allow-unchecked" in out
    assert all(f in out for f in files)                                      # every file reported
    assert main(["verify", "--allow-unchecked", *files]) == 1                # unreadable files still fail
    good = [str(env / "run-b.json"), str(env / "run-d.json")]
    assert main(["verify", *good]) == 1
    assert main(["verify", "--allow-unchecked", *good]) == 0
    assert "2 unchecked (allowed by --allow-unchecked)" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "nope.json")]) == 1
    assert "UNREADABLE  " in capsys.readouterr().out
    for argv in ([], ["verify"], ["verify", "--allow-uncheked", files[0]], ["check", files[0]], ["repair"]):
        assert main(argv) == 2, argv
        assert "usage:" in capsys.readouterr().err


def test_env_record_carries_the_digest_and_the_command_checks_it(tmp_path, capsys, monkeypatch):
    """This repository's own env record has the digest of the tree on disk, and `verify` passes it on a clean
    checkout (CI's clone); a checkout with local edits may legitimately mismatch."""
    from artifact.env_record import write_env
    monkeypatch.delenv("ONELA_GIT_COMMIT", raising=False)
    rec = write_env(tmp_path / "env.json")
    assert rec["source_sha256"] == source_digest()
    code = main(["verify", str(tmp_path / "env.json")])
    if not rec["git_commit"].endswith("+dirty"):
        assert code == 0, capsys.readouterr().out
    assert "env.json" in capsys.readouterr().out
    assert main([]) == 2
