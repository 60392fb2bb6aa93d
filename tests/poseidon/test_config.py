"""poseidon.config: every setting from its variable, launcher fallbacks,
overrides, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from poseidon import _C
from poseidon.config import SETTINGS, Config, SettingError, parse_bytes

DOCS = Path(__file__).resolve().parents[2] / "docs" / "communication.md"


def test_defaults_match_the_cpp_constants() -> None:
    c = Config()
    assert c.chunk_bytes == _C.DEFAULT_CHUNK_BYTES
    assert c.max_frame_bytes == _C.DEFAULT_MAX_FRAME_BYTES
    assert c.timeout_ms == _C.DEFAULT_TIMEOUT_MS
    assert c.heartbeat_interval_ms == _C.DEFAULT_HEARTBEAT_INTERVAL_MS
    assert c.heartbeat_timeout_ms == _C.DEFAULT_HEARTBEAT_TIMEOUT_MS
    assert c.handshake_timeout_ms == _C.DEFAULT_HANDSHAKE_TIMEOUT_MS
    assert c.comm_threads == _C.DEFAULT_COMM_THREADS
    assert c.notsent_lowat_bytes == _C.Config().notsent_lowat_bytes
    # The experiments' chunk (emulation, predictor) is the core's default too.
    from poseidon.experiments import run

    assert run.DEFAULT_CHUNK_BYTES == _C.DEFAULT_CHUNK_BYTES


def test_every_variable_is_read() -> None:
    env = {
        "POSEIDON_ROLE": "server",
        "POSEIDON_RANK": "2",
        "POSEIDON_NUM_WORKERS": "8",
        "POSEIDON_NUM_SERVERS": "4",
        "POSEIDON_COORDINATOR": "10.0.0.1:7000",
        "POSEIDON_TOKEN": "s3cret",
        "POSEIDON_LISTEN": "10.0.0.5:7100",
        "POSEIDON_HOST": "10.0.0.5",
        "POSEIDON_TRANSPORT": "inproc",
        "POSEIDON_CHUNK_BYTES": "512KiB",
        "POSEIDON_MAX_FRAME_BYTES": "128M",
        "POSEIDON_TIMEOUT_MS": "9000",
        "POSEIDON_HEARTBEAT_INTERVAL_MS": "100",
        "POSEIDON_HEARTBEAT_TIMEOUT_MS": "1500",
        "POSEIDON_HANDSHAKE_TIMEOUT_MS": "700",
        "POSEIDON_COMM_THREADS": "3",
        "POSEIDON_SOCKET_BUFFER_BYTES": "4MB",
        "POSEIDON_NOTSENT_LOWAT_BYTES": "8KiB",
        "POSEIDON_SCHEME": "SFB",
        "POSEIDON_VERBOSE": "yes",
    }
    assert set(env) <= {s.env for s in SETTINGS}
    c = Config.from_env(env)
    assert c == Config(
        role="server",
        rank=2,
        num_workers=8,
        num_servers=4,
        coordinator="10.0.0.1:7000",
        token="s3cret",
        listen="10.0.0.5:7100",
        host="10.0.0.5",
        transport="inproc",
        chunk_bytes=512 << 10,
        max_frame_bytes=128 << 20,
        timeout_ms=9000,
        heartbeat_interval_ms=100,
        heartbeat_timeout_ms=1500,
        handshake_timeout_ms=700,
        comm_threads=3,
        socket_buffer_bytes=4 << 20,
        notsent_lowat_bytes=8 << 10,
        scheme="sfb",
        verbose=True,
    )
    native = c.to_native()
    assert native.role == _C.Role.SERVER
    assert native.scheme == _C.SchemeChoice.SFB
    assert native.chunk_bytes == 512 << 10
    assert native.listen == "10.0.0.5:7100"
    assert native.notsent_lowat_bytes == 8 << 10


def test_all_reduce_bucket_sizes() -> None:
    c = Config.from_env({"POSEIDON_BUCKET_CAP_BYTES": "4MiB", "POSEIDON_FIRST_BUCKET_BYTES": "64k"})
    assert (c.bucket_cap_bytes, c.first_bucket_bytes) == (4 << 20, 64 << 10)
    assert Config().bucket_cap_bytes == 25 << 20  # DDP's bucket_cap_mb


@pytest.mark.parametrize(
    ("launcher", "rank", "size"),
    [
        ({"RANK": "3", "WORLD_SIZE": "4"}, 3, 4),  # torchrun
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1, 2),  # Open MPI
        ({"PMI_RANK": "5", "PMI_SIZE": "6"}, 5, 6),  # MPICH / Intel MPI
        ({"SLURM_PROCID": "7", "SLURM_NTASKS": "8"}, 7, 8),  # srun
    ],
)
def test_launcher_variables_name_workers(launcher: dict, rank: int, size: int) -> None:
    c = Config.from_env({"POSEIDON_TOKEN": "t", **launcher})
    assert (c.rank, c.num_workers) == (rank, size)
    # POSEIDON_* wins over the launcher, and servers ignore launcher ranks.
    c = Config.from_env({"POSEIDON_TOKEN": "t", "POSEIDON_RANK": "0", **launcher})
    assert c.rank == 0
    c = Config.from_env({"POSEIDON_ROLE": "server", **launcher})
    assert c.rank == 0


def test_torchrun_master_address_locates_the_coordinator() -> None:
    c = Config.from_env({"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500"})
    assert c.coordinator == "10.1.2.3:29501"
    c = Config.from_env({"MASTER_ADDR": "10.1.2.3", "POSEIDON_COORDINATOR": "h:1"})
    assert c.coordinator == "h:1"


def test_overrides_and_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("from-file\n")
    c = Config.from_env(
        {"POSEIDON_TOKEN_FILE": str(token), "POSEIDON_NUM_WORKERS": "2"},
        num_workers=4,
        chunk_bytes="1M",
        verbose=None,  # not given: the environment (default) stays
    )
    assert (c.token, c.num_workers, c.chunk_bytes, c.verbose) == ("from-file", 4, 1 << 20, False)


def test_listen_address_defaults() -> None:
    assert Config(coordinator="127.0.0.1:1").listen_address == "127.0.0.1:0"
    assert Config(transport="inproc").listen_address == "inproc://"
    assert Config(host="10.9.8.7").listen_address == "10.9.8.7:0"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"POSEIDON_NUM_WORKERS": "two"}, "POSEIDON_NUM_WORKERS='two' is not an integer"),
        ({"POSEIDON_ROLE": "boss"}, "POSEIDON_ROLE='boss': want one of worker, server"),
        ({"POSEIDON_CHUNK_BYTES": "lots"}, "POSEIDON_CHUNK_BYTES='lots' is not a byte count"),
        ({"POSEIDON_VERBOSE": "maybe"}, "POSEIDON_VERBOSE='maybe' is not a boolean"),
        ({"POSEIDON_RANK": "3", "POSEIDON_NUM_WORKERS": "2"}, "rank=3 for a worker"),
        ({"POSEIDON_TOKEN_FILE": "/nonexistent/token"}, "POSEIDON_TOKEN_FILE="),
    ],
)
def test_errors_name_the_variable(env: dict, message: str) -> None:
    with pytest.raises(SettingError, match=message.replace("(", r"\(")):
        Config.from_env(env)


def test_cpp_validation_runs_too() -> None:
    with pytest.raises(_C.ConfigError, match="token is empty"):
        Config().to_native()
    with pytest.raises(_C.ConfigError, match="chunk_bytes=6"):
        Config(token="t", chunk_bytes=6).to_native()


def test_parse_bytes() -> None:
    assert parse_bytes("4194304") == 4 << 20
    assert parse_bytes("4MiB") == parse_bytes("4M") == parse_bytes("4mb") == 4 << 20
    assert parse_bytes("64k") == 64 << 10
    assert parse_bytes("1G") == 1 << 30


def test_docs_table_lists_every_setting() -> None:
    text = DOCS.read_text()
    for s in SETTINGS:
        assert f"`{s.env}`" in text, f"{s.env} missing from {DOCS.name}"
    assert "`POSEIDON_TOKEN_FILE`" in text


def test_layer_schemes() -> None:
    c = Config.from_env({"POSEIDON_LAYER_SCHEMES": " fc7=ps, fc8=SFB ,"})
    assert c.layer_schemes == {"fc7": "ps", "fc8": "sfb"}
    assert Config().layer_schemes == {}
    with pytest.raises(SettingError, match="POSEIDON_LAYER_SCHEMES='fc7=fast'"):
        Config.from_env({"POSEIDON_LAYER_SCHEMES": "fc7=fast"})


@pytest.mark.parametrize(
    ("colocate", "workers", "servers", "expected"),
    [(True, 4, 4, 4), (True, 4, 2, 2), (True, 2, 4, 2), (False, 4, 4, 0)],
)
def test_colocated_shards_are_the_ranks_with_a_shard_beside_them(
    colocate: bool, workers: int, servers: int, expected: int
) -> None:
    config = Config(num_workers=workers, num_servers=servers, colocate=colocate)
    assert config.colocated_shards == expected


def test_compression_settings() -> None:
    from poseidon import _C

    c = Config.from_env({"POSEIDON_COMPRESSION": "PowerSGD:8", "POSEIDON_LINK_RATE": "100mbit",
                         "POSEIDON_GEMM_RATE": "2.5e12"})  # fmt: skip
    assert c.allowance() == ("powersgd", 8)
    # Bytes sent + received per second: 100 Mbit/s each way, both ways at once.
    assert c.link_rate == 1e8 and c.rates().link_bytes_per_s == 2.5e7
    native = c.replace(token="t").to_native()
    assert native.compression == _C.Compression.POWERSGD and native.powersgd_rank == 8
    assert native.rates.gemm_flops_per_s == 2.5e12
    assert Config().allowance() == ("none", 4)
    assert Config.from_env({"POSEIDON_COMPRESSION": "auto"}).allowance() == ("auto", 4)
    with pytest.raises(SettingError, match="name different ranks"):
        Config.from_env({"POSEIDON_COMPRESSION": "powersgd:8", "POSEIDON_POWERSGD_RANK": "2"})
    with pytest.raises(SettingError, match="POSEIDON_POWERSGD_RANK='0': want an integer >= 1"):
        Config.from_env({"POSEIDON_POWERSGD_RANK": "0"})
    with pytest.raises(SettingError, match="POSEIDON_LINK_RATE: bandwidth 'fast'"):
        Config.from_env({"POSEIDON_LINK_RATE": "fast"})
    with pytest.raises(SettingError, match="POSEIDON_GEMM_RATE='-1'"):
        Config.from_env({"POSEIDON_GEMM_RATE": "-1"})
    assert Config.from_env({"POSEIDON_LAYER_SCHEMES": "fc7=powersgd"}).layer_schemes == {
        "fc7": "powersgd"
    }
