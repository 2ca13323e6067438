"""TLS from PEM files: a server's credentials (mutual when it names a client CA) and the credentials a client dials
with. Files are read when a process starts; one that cannot be read is a ValueError naming its config field."""
from __future__ import annotations

from pathlib import Path

import grpc

from runtime.config import ServerConfig, StageTlsConfig


def _read(path: str, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"config field {field}={path!r}: cannot read it ({err.strerror}); mount the PEM file there "
                         "or correct the path") from None


def server_credentials(cfg: ServerConfig, section: str) -> grpc.ServerCredentials | None:
    """None for a plaintext port. `section`: where `cfg` sits in the mesh config, for error messages."""
    if not cfg.tls_cert_file:
        return None
    pair = (_read(cfg.tls_key_file, f"{section}.tls_key_file"), _read(cfg.tls_cert_file, f"{section}.tls_cert_file"))
    ca = _read(cfg.tls_client_ca_file, f"{section}.tls_client_ca_file") if cfg.tls_client_ca_file else None
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)


def stage_channel_credentials(cfg: StageTlsConfig) -> grpc.ChannelCredentials | None:
    """None when the stages are dialled in plaintext."""
    if not cfg.ca_file:
        return None
    key = _read(cfg.key_file, "gateway.stage_tls.key_file") if cfg.key_file else None
    cert = _read(cfg.cert_file, "gateway.stage_tls.cert_file") if cfg.cert_file else None
    return grpc.ssl_channel_credentials(_read(cfg.ca_file, "gateway.stage_tls.ca_file"), key, cert)
