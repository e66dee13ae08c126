"""A real S3-compatible server for the tiered storage tests: moto's server in its own process
on loopback, never an in-process mock."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from kafka_oracle import free_port


class S3Server:
    """moto's S3 server as a separate process on loopback."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.log = (root / "moto.log").open("wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("moto's S3 server did not listen in 60 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def uri(self, bucket: str) -> str:
        return (
            f"s3://{bucket}/tiered?endpoint_override=127.0.0.1:{self.port}&scheme=http"
            "&region=us-east-1&allow_bucket_creation=true"
        )
