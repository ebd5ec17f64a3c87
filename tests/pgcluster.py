"""A private PostgreSQL cluster for the tests that need one.

The machine's own PostgreSQL may run with ``wal_level = replica``, which
cannot do logical decoding, and other runs share it: these tests start a
cluster of their own in a temporary folder (``initdb``, ``wal_level=logical``,
a free port on 127.0.0.1) and stop it at the end. ``initdb`` refuses to run
as root, so as root the cluster belongs to the ``postgres`` user.

By hand without PostgreSQL's programs the tests skip with the reason; under
CI=true they fail (tests/services.py).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from tests.services import free_port, unavailable


def _bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


@dataclass
class Cluster:
    """A running private cluster: ``url`` reaches its ``postgres`` database
    as the superuser ``postgres`` (trust authentication, loopback only)."""

    folder: str
    bindir: str
    port: int
    owner: str | None   # the user the server runs as, when started by root

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self.owner is not None:
            command = ["runuser", "-u", self.owner, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=check,
                              cwd=self.folder)

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        import psycopg2
        conn = psycopg2.connect(self.url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return self.dsn(name)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", os.path.join(self.folder, "data"), "-m", "immediate",
                  "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


def start_cluster() -> Cluster:
    """Start a private cluster with ``wal_level = logical``; skip (fail in
    CI) when PostgreSQL's programs are not installed."""
    bindir = _bindir()
    if bindir is None:
        unavailable("PostgreSQL's programs (initdb, pg_ctl) are not installed")
    assert bindir is not None
    owner = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root and there is no 'postgres' user to own a cluster")
        owner = "postgres"
    folder = tempfile.mkdtemp(prefix="pe-pg-")
    if owner is not None:
        entry = pwd.getpwnam(owner)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    os.chmod(folder, 0o755)
    cluster = Cluster(folder, bindir, free_port(), owner)
    data = os.path.join(folder, "data")
    done = cluster._run("initdb", "-D", data, "-A", "trust", "-U", "postgres",
                        "--no-sync", "-E", "UTF8", "--locale", "C", check=False)
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        unavailable(f"initdb failed: {done.stderr.strip()[-500:]}")
    options = (f"-p {cluster.port} -c wal_level=logical -c listen_addresses=127.0.0.1 "
               f"-c unix_socket_directories={folder} -c max_replication_slots=20 "
               f"-c max_wal_senders=20 -c fsync=off -c synchronous_commit=off "
               f"-c full_page_writes=off -c max_connections=200")
    started = cluster._run("pg_ctl", "-D", data, "-w", "-t", "60", "-l",
                           os.path.join(folder, "log"), "-o", options, "start", check=False)
    if started.returncode != 0:
        log = ""
        try:
            with open(os.path.join(folder, "log")) as f:
                log = f.read()[-1000:]
        except OSError:
            pass
        shutil.rmtree(folder, ignore_errors=True)
        unavailable(f"the private PostgreSQL did not start: {started.stderr.strip()} {log}")
    deadline = time.monotonic() + 30
    import psycopg2
    while True:
        try:
            psycopg2.connect(cluster.url, connect_timeout=2).close()
            break
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                cluster.stop()
                unavailable("the private PostgreSQL does not accept connections")
            time.sleep(0.1)
    return cluster
