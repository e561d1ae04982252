"""Git access for the gates: gitpython where installed, the `git` command line otherwise
(the GPU machine has no gitpython). Read-only except `commit_files_on_branch`, which writes
objects and one ref through a private index, never touching the working tree or the index."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any


class GitError(RuntimeError):
    pass


class Git:
    _repo: Any                      # a gitpython Repo, or None where gitpython is missing (the git CLI then)

    def __init__(self, root: Path):
        self.root = Path(root)
        try:
            import git  # gitpython

            try:
                self._repo = git.Repo(self.root)
            except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
                raise GitError(f"{self.root} is not a git repository") from exc
        except ImportError:
            self._repo = None
            if self._cli("rev-parse", "--is-inside-work-tree", check=False) != "true":
                raise GitError(f"{self.root} is not a git repository (or git is missing)")

    @property
    def backend(self) -> str:
        return "gitpython" if self._repo is not None else "git-cli"

    def _cli(self, *args: str, check: bool = True, env: dict | None = None) -> str:
        try:
            proc = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True,
                                  env={**os.environ, **(env or {})}, timeout=60)
        except FileNotFoundError as exc:
            raise GitError("git is not installed") from exc
        if check and proc.returncode != 0:
            raise GitError(f"git {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout.rstrip("\n") if proc.returncode == 0 else ""

    def run(self, *args: str, env: dict | None = None) -> str:
        if self._repo is not None:
            import git

            try:
                return self._repo.git.execute(["git", *args], env={**os.environ, **(env or {})})
            except git.GitCommandError as exc:
                raise GitError(f"git {' '.join(args)}: {str(exc.stderr).strip()}") from exc
        return self._cli(*args, env=env)

    # ---- queries -------------------------------------------------------------------
    def rev(self, ref: str) -> str:
        return self.run("rev-parse", "--verify", f"{ref}^{{commit}}")

    def has_ref(self, ref: str) -> bool:
        try:
            self.rev(ref)
            return True
        except GitError:
            return False

    def default_base(self) -> str:
        """HARNESS_GATE_BASE if set; else the merge-base of HEAD with main (or origin/main);
        else HEAD (a candidate gated on main itself: the uncommitted change is the diff)."""
        env = os.environ.get("HARNESS_GATE_BASE")
        if env:
            return self.rev(env)
        head = self.rev("HEAD")
        for ref in ("origin/main", "main", "master"):
            if self.has_ref(ref):
                base = self.run("merge-base", "HEAD", ref)
                if base and base != head:
                    return base
        return head

    def changed_paths(self, base: str) -> list[str]:
        """Every path that differs between `base` and the working tree, untracked included
        (ignored files excluded), renames split into delete + add."""
        tracked = self.run("diff", "--name-only", "--no-renames", base, "--")
        untracked = self.run("ls-files", "--others", "--exclude-standard")
        return sorted({p for p in (tracked + "\n" + untracked).splitlines() if p.strip()})

    def show(self, rev: str, path: str) -> bytes | None:
        """A file's bytes at `rev`; None when it does not exist there."""
        try:
            out = self.run("show", f"{rev}:{path}")
        except GitError:
            return None
        return out.encode()

    # ---- the one write -------------------------------------------------------------
    def commit_files_on_branch(self, branch: str, files: dict[str, bytes], message: str,
                               parent: str = "HEAD") -> str:
        """Commit `files` (repo-relative path -> bytes) on top of `parent` as refs/heads/<branch>,
        through a private index file: the working tree and the shared index stay untouched."""
        parent_sha = self.rev(parent)
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.run("read-tree", parent_sha, env=env)
            for rel, data in sorted(files.items()):
                blob_src = Path(tmp) / "blob"
                blob_src.write_bytes(data)
                sha = self.run("hash-object", "-w", str(blob_src))
                self.run("update-index", "--add", "--cacheinfo", f"100644,{sha},{rel}", env=env)
            tree = self.run("write-tree", env=env)
            commit = self.run("commit-tree", tree, "-p", parent_sha, "-m", message,
                              env=self._identity_env())
        self.run("update-ref", f"refs/heads/{branch}", commit)
        return commit

    def _identity_env(self) -> dict[str, str]:
        """The configured identity; a harness identity only where git has none."""
        env: dict[str, str] = {}
        for key, var, default in (("user.name", "NAME", "k3-harness"), ("user.email", "EMAIL", "harness@localhost")):
            try:
                configured = self.run("config", key)
            except GitError:
                configured = ""
            if not configured and f"GIT_AUTHOR_{var}" not in os.environ:
                env[f"GIT_AUTHOR_{var}"] = env[f"GIT_COMMITTER_{var}"] = default
        return env

