"""CPU descriptions (``data/cpus.toml``): the host that computes experts when they are not on the GPU.

Each CPU entry holds published numbers only — sockets, NUMA nodes, cores per
socket, clocks, memory channels per socket and their transfer rate — and names
its core microarchitecture, whose per-core rate of each matrix ISA (operations
per cycle) is a ``[cores.*]`` table of the same file.  What the cost model
needs is computed here, never typed in:

- peak DRAM bandwidth = channels × MT/s × 8 bytes (one 64-bit channel) × sockets;
- the peak of an ISA = sockets × cores × base clock × the core's operations per
  cycle (GFLOP/s, or GOP/s for INT8), the way vendors state peak FLOP/s.

Every value carries a source (``sources.<field>``), or says ``assumed`` and why
(docs/models-and-gpus.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simmoe.hardware.catalogue_io import (
    DATA_DIR,
    CatalogueError,
    check_name,
    integer,
    number,
    read_tables,
    string,
)

CPUS_FILE = DATA_DIR / "cpus.toml"

# the matrix ISAs of the expert kernels, and what each one's rate counts (an FMA or a MAC is 2 operations)
ISAS = ("avx2", "avx512", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
ISA_UNITS = {"avx2": "FP32 FLOP", "avx512": "FP32 FLOP", "avx512_bf16": "BF16 FLOP", "avx512_vnni": "INT8 OP",
             "amx_bf16": "BF16 FLOP", "amx_int8": "INT8 OP"}
BYTES_PER_TRANSFER = 8          # a DDR4/DDR5 channel is 64 bits wide (DDR5: two 32-bit subchannels)

_CPU_INTS = ("sockets", "numa_nodes", "cores", "memory_channels")
_CPU_FLOATS = ("base_ghz", "boost_ghz", "memory_mts", "memory_gb")


@dataclass(frozen=True)
class CoreRates:
    """One core microarchitecture's operations per cycle per core of each ISA (0: the ISA is absent)."""

    key: str
    name: str
    rates: dict[str, float]
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CPU:
    """One host: sockets of one CPU model, its memory configuration, and its cores' ISA rates."""

    key: str
    name: str
    core: CoreRates
    sockets: int
    numa_nodes: int
    cores: int                  # per socket
    base_ghz: float
    boost_ghz: float
    memory: str                 # DDR4, DDR5
    memory_channels: int        # per socket
    memory_mts: float           # transfer rate, MT/s
    memory_gb: float            # installed DRAM of the whole system
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def total_cores(self) -> int:
        return self.sockets * self.cores

    @property
    def dram_gbps_per_socket(self) -> float:
        """Peak DRAM bandwidth of one socket, GB/s: channels × MT/s × 8 bytes."""
        return self.memory_channels * self.memory_mts * BYTES_PER_TRANSFER / 1e3

    @property
    def dram_gbps(self) -> float:
        """Peak DRAM bandwidth of the whole system, GB/s (every socket reading its own channels)."""
        return self.dram_gbps_per_socket * self.sockets

    def isa_peak(self, isa: str) -> float:
        """Peak GFLOP/s (GOP/s for INT8) of ``isa`` over every core at the base clock; 0 when absent."""
        if isa not in ISAS:
            raise CatalogueError(f"unknown ISA {isa!r}; known: {', '.join(ISAS)}")
        return self.total_cores * self.base_ghz * self.core.rates[isa]

    def isa_peaks(self) -> dict[str, float]:
        return {isa: self.isa_peak(isa) for isa in ISAS}

    @property
    def memory_bytes(self) -> float:
        """Installed DRAM in bytes, the GB read as 2^30 bytes (as installed memory is counted)."""
        return self.memory_gb * 2.0 ** 30

    def to_dict(self) -> dict:
        return {"key": self.key, "name": self.name, "core": self.core.key, "core_name": self.core.name,
                "sockets": self.sockets, "numa_nodes": self.numa_nodes, "cores": self.cores,
                "base_ghz": self.base_ghz, "boost_ghz": self.boost_ghz, "memory": self.memory,
                "memory_channels": self.memory_channels, "memory_mts": self.memory_mts,
                "memory_gb": self.memory_gb, "sources": dict(self.sources),
                "core_rates": dict(self.core.rates), "core_sources": dict(self.core.sources),
                "derived": {"dram_gbps": self.dram_gbps, "dram_gbps_per_socket": self.dram_gbps_per_socket,
                            "isa_peaks_gops": self.isa_peaks()}}


def _sources(t: dict, names: tuple[str, ...], where: str) -> dict[str, str]:
    """The ``sources`` table: one non-empty string for every name (a value without a source is refused)."""
    src = t.get("sources")
    if not isinstance(src, dict):
        raise CatalogueError(f"{where}: missing table 'sources' (every value needs a source or 'assumed: why')")
    unknown = sorted(set(src) - set(names))
    if unknown:
        raise CatalogueError(f"{where}: sources names an unknown field {unknown[0]!r}")
    out = {}
    for name in names:
        s = src.get(name)
        if not isinstance(s, str) or not s.strip():
            raise CatalogueError(f"{where}: field {name!r} has no source (give one, or 'assumed: why')")
        out[name] = s
    return out


def _core_from_table(key: str, t: object, origin: str) -> CoreRates:
    where = f"{origin}: core {key!r}"
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: must be a table")
    unknown = sorted(set(t) - {"name", "sources", *ISAS})
    if unknown:
        raise CatalogueError(f"{where}: unknown field {unknown[0]!r}")
    rates = {isa: number(t, isa, where) for isa in ISAS}
    return CoreRates(key, string(t, "name", where), rates, _sources(t, ISAS, where))


def _cpu_from_table(key: str, t: object, cores: dict[str, CoreRates], origin: str) -> CPU:
    where = f"{origin}: cpu {key!r}"
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: must be a table")
    unknown = sorted(set(t) - {"name", "core", "memory", "sources", *_CPU_INTS, *_CPU_FLOATS})
    if unknown:
        raise CatalogueError(f"{where}: unknown field {unknown[0]!r}")
    core = string(t, "core", where)
    if core not in cores:
        raise CatalogueError(f"{where}: unknown core {core!r}; the file describes: {', '.join(cores) or 'none'}")
    ints = {name: integer(t, name, where) for name in _CPU_INTS}
    floats = {name: number(t, name, where, positive=True) for name in _CPU_FLOATS}
    if floats["boost_ghz"] < floats["base_ghz"]:
        raise CatalogueError(f"{where}: boost_ghz {floats['boost_ghz']:g} is below base_ghz {floats['base_ghz']:g}")
    if ints["numa_nodes"] < ints["sockets"]:
        raise CatalogueError(f"{where}: numa_nodes {ints['numa_nodes']} is below sockets {ints['sockets']}")
    sources = _sources(t, ("name", "memory", *_CPU_INTS, *_CPU_FLOATS), where)
    return CPU(key=key, name=string(t, "name", where), core=cores[core], sockets=ints["sockets"],
               numa_nodes=ints["numa_nodes"], cores=ints["cores"], base_ghz=floats["base_ghz"],
               boost_ghz=floats["boost_ghz"], memory=string(t, "memory", where),
               memory_channels=ints["memory_channels"], memory_mts=floats["memory_mts"],
               memory_gb=floats["memory_gb"], sources=sources)


_CPUS: dict[str, dict[str, CPU]] = {}


def load_cpus(path: str | Path | None = None) -> dict[str, CPU]:
    """Every CPU of a description file (the shipped one by default), by key, in file order."""
    p = Path(path) if path is not None else CPUS_FILE
    if path is None and str(p) in _CPUS:
        return _CPUS[str(p)]
    core_tables, cpu_tables = read_tables(p, "CPU description", ("cores", "cpus"))
    cores = {k: _core_from_table(k, t, str(p)) for k, t in core_tables.items()}
    out = {k: _cpu_from_table(k, t, cores, str(p)) for k, t in cpu_tables.items()}
    if not out:
        raise CatalogueError(f"{p}: holds no CPU")
    if path is None:
        _CPUS[str(p)] = out
    return out


def cpu_names() -> list[str]:
    return list(load_cpus())


def load_cpu(name: str) -> CPU:
    """A shipped CPU description by key; an unknown key is one line naming the known ones."""
    check_name(name, "CPU", CatalogueError)
    cpus = load_cpus()
    if name in cpus:
        return cpus[name]
    raise CatalogueError(f"unknown CPU {name!r}; known: {', '.join(cpus)}")
