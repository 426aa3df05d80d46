"""scripts/sync_oracle.py on temporary folders, and how tests/oracle.py picks oracle files.

No Paddle counterpart: the repository keeps its own copy of the recorded
Paddle facts in ``oracle/`` and syncs it from ``../shared/oracle``.
"""
import importlib.util
import os
import subprocess
import sys

import pytest

import oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "sync_oracle.py")


def _script():
    spec = importlib.util.spec_from_file_location("sync_oracle", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sync_oracle = _script()


def _write(root, rel, data):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "shared" / "oracle"
    _write(d, "joblists.json", b'{"entries": []}\n')
    _write(d, "programs/00_mlp_sgd.json", b'{"case": "mlp"}')
    _write(d, "zoo/pdmodels/m.pdiparams", bytes(range(256)))
    _write(d, "__pycache__/models.cpython-311.pyc", b"\x00")
    _write(d, "zoo/old.pyc", b"\x00")
    return d


def test_sync_into_an_empty_folder_copies_every_recorded_file_byte_for_byte(src, tmp_path, capsys):
    dst = tmp_path / "repo" / "oracle"
    assert sync_oracle.main(["--from", str(src), "--to", str(dst)]) == 0
    out = capsys.readouterr().out.splitlines()
    want = ["joblists.json", "programs/00_mlp_sgd.json", "zoo/pdmodels/m.pdiparams"]
    assert out[:3] == [f"added {rel}" for rel in want]
    assert out[3] == f"3 files copied from {src} to {dst}"
    for rel in want:
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()
    assert not (dst / "__pycache__").exists() and not (dst / "zoo" / "old.pyc").exists()


def test_check_lists_new_and_changed_files_and_changes_nothing(src, tmp_path, capsys):
    dst = tmp_path / "oracle"
    sync_oracle.sync(str(src), str(dst))
    _write(src, "programs/01_new.json", b"{}")
    _write(src, "joblists.json", b'{"entries": [1]}\n')
    assert sync_oracle.main(["--from", str(src), "--to", str(dst), "--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["changed joblists.json", "added programs/01_new.json"]
    assert "is behind" in out[2]
    assert (dst / "joblists.json").read_bytes() == b'{"entries": []}\n'
    assert not (dst / "programs" / "01_new.json").exists()


def test_sync_brings_a_behind_copy_up_to_date_and_keeps_files_only_it_has(src, tmp_path, capsys):
    dst = tmp_path / "oracle"
    sync_oracle.sync(str(src), str(dst))
    _write(dst, "SYNC.md", b"local notes")
    _write(src, "joblists.json", b"new")
    assert sync_oracle.sync(str(src), str(dst)) == [("changed", "joblists.json")]
    assert (dst / "joblists.json").read_bytes() == b"new"
    assert (dst / "SYNC.md").read_bytes() == b"local notes"
    assert sync_oracle.main(["--from", str(src), "--to", str(dst), "--check"]) == 0
    assert capsys.readouterr().out == f"{dst} is up to date with {src}\n"


def test_a_file_of_the_same_size_with_other_bytes_counts_as_changed(src, tmp_path):
    dst = tmp_path / "oracle"
    sync_oracle.sync(str(src), str(dst))
    rel = "zoo/pdmodels/m.pdiparams"
    data = bytearray((src / rel).read_bytes())
    data[100] ^= 1
    _write(dst, rel, bytes(data))
    st = os.stat(src / rel)
    os.utime(dst / rel, ns=(st.st_atime_ns, st.st_mtime_ns))   # same size and time: only the bytes differ
    assert sync_oracle.differences(str(src), str(dst)) == [("changed", "zoo/pdmodels/m.pdiparams")]


def test_the_script_runs_from_the_command_line_and_refuses_a_missing_folder(src, tmp_path):
    dst = tmp_path / "oracle"
    run = lambda *args: subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                                       timeout=60)
    r = run("--from", str(src), "--to", str(dst), "--check")
    assert r.returncode == 1 and "added joblists.json" in r.stdout and not dst.exists()
    r = run("--from", str(tmp_path / "missing"), "--to", str(dst))
    assert r.returncode == 2 and "no folder" in r.stderr


def test_the_repository_holds_the_oracle_files_the_tests_read():
    repo = os.path.join(ROOT, "oracle")
    for rel in ("README.md", "joblists.json", "fleet.json", "models.py", "JOBLISTS.md", "FLEET.md"):
        assert os.path.isfile(os.path.join(repo, rel)), rel
    assert [n for n in os.listdir(os.path.join(repo, "programs")) if n.endswith(".json")]


def test_the_shared_copy_wins_and_its_new_cases_join_in(tmp_path, monkeypatch):
    repo, shared = tmp_path / "main" / "oracle", tmp_path / "shared" / "oracle"
    _write(repo, "programs/00_a.json", b"repo")
    _write(repo, "programs/01_b.json", b"repo")
    _write(repo, "fleet.json", b"repo")
    _write(shared, "programs/01_b.json", b"shared")
    _write(shared, "programs/02_c.json", b"shared")
    monkeypatch.delenv("REFIMPL_ORACLE", raising=False)
    monkeypatch.setattr(oracle, "ORACLE", str(repo))
    monkeypatch.setattr(oracle, "SHARED", str(shared))
    assert oracle.case_files() == [str(repo / "programs/00_a.json"), str(shared / "programs/01_b.json"),
                                   str(shared / "programs/02_c.json")]
    assert oracle.oracle_file("fleet.json") == str(repo / "fleet.json")
    assert oracle.oracle_file(os.path.join("programs", "01_b.json")) == str(shared / "programs/01_b.json")
    assert oracle.oracle_file("joblists.json") == str(repo / "joblists.json")   # in neither: the repo's path


def test_without_a_shared_folder_or_with_refimpl_oracle_set_only_one_folder_is_read(tmp_path, monkeypatch):
    repo, shared = tmp_path / "main" / "oracle", tmp_path / "shared" / "oracle"
    _write(repo, "programs/00_a.json", b"repo")
    _write(shared, "programs/01_b.json", b"shared")
    monkeypatch.setattr(oracle, "ORACLE", str(repo))
    monkeypatch.setattr(oracle, "SHARED", str(tmp_path / "absent"))
    monkeypatch.delenv("REFIMPL_ORACLE", raising=False)
    assert oracle.case_files() == [str(repo / "programs/00_a.json")]
    monkeypatch.setattr(oracle, "SHARED", str(shared))
    monkeypatch.setenv("REFIMPL_ORACLE", str(repo))
    assert oracle.oracle_dirs() == [str(repo)]
    assert oracle.case_files() == [str(repo / "programs/00_a.json")]


def test_refimpl_schedule_reads_the_repositorys_joblists_unless_refimpl_oracle_is_set(tmp_path, monkeypatch):
    from refimpl.schedule_cli import default_joblists_path
    monkeypatch.delenv("REFIMPL_ORACLE", raising=False)
    assert default_joblists_path() == os.path.join(ROOT, "oracle", "joblists.json")
    monkeypatch.setenv("REFIMPL_ORACLE", str(tmp_path))
    assert default_joblists_path() == str(tmp_path / "joblists.json")
