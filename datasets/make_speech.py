"""Regenerate speech.npz: short synthetic utterances for the wake-word models of MLTS.

Made with Debian's espeak-ng (``apt-get install -y espeak-ng``); the committed file was made with
espeak-ng 1.51 (Debian package 1.51+dfsg-10+deb12u2), the version is stored in the file. Each
phrase is spoken by espeak-ng at its native 22,050 Hz, resampled to 16 kHz (scipy
``resample_poly``, 320/441), trimmed to the speech plus 50 ms either side, and scaled so that its
peak is 0.7 of full scale, as int16 mono.

- Positives: each wake word of the openWakeWord / microWakeWord models (``WAKE_WORDS``) in
  every rendering of ``RENDERINGS`` (espeak-ng voice+variant, speed in words per minute, pitch
  0-99).
- Negatives: other words and phrases (``NEGATIVES``), each in one rendering, in turn.

speech.npz holds ``audio`` (all clips end to end, int16), ``offsets`` (clip i is
``audio[offsets[i]:offsets[i + 1]]``), and per clip ``text``, ``wake_word`` (the model's name,
"" for a negative), ``voice``, ``speed``, ``pitch``; and ``sample_rate`` and
``espeak_version``. It is read by ``nncert.mlts.datasets.speech``.

    python datasets/make_speech.py
"""

from __future__ import annotations

import io
import subprocess
import wave
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

OUT = Path(__file__).resolve().parent / "speech.npz"
SAMPLE_RATE = 16_000
ESPEAK_RATE = 22_050
PEAK = 0.7
MARGIN_S = 0.05

# model name -> (phrase, what espeak-ng is given: phonemes in [[...]] where its own reading is off)
WAKE_WORDS = {
    "alexa": ("alexa", "alexa"),
    "hey_jarvis": ("hey jarvis", "hey jarvis"),
    "hey_mycroft": ("hey mycroft", "hey [[m'aIkr0ft]]"),  # MY-croft, not mick-roft
    "okay_nabu": ("okay nabu", "okay nabu"),
    "hey_rhasspy": ("hey rhasspy", "hey rhasspy"),
}

# (voice+variant, words per minute, pitch)
RENDERINGS = [
    ("en-us", 150, 50),
    ("en-us+f2", 170, 62),
    ("en-gb+m3", 140, 40),
    ("en-gb-scotland+f4", 160, 70),
    ("en-029+m1", 175, 45),
    ("en-gb-x-rp+f1", 135, 55),
    ("en-us-nyc+m7", 185, 35),
    ("en-us+klatt2", 155, 50),
]

NEGATIVES = [
    "hello", "good morning", "what time is it", "turn on the lights", "play some music",
    "stop", "yes", "no", "seven", "thank you very much", "open the door", "how are you",
    "set a timer for ten minutes", "the weather is nice today", "call my mother",
    "alex", "harvest", "my car", "okay", "hey there",
]


def synthesize(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (ESPEAK_RATE, 1, 2):
            raise SystemExit(f"espeak-ng gave {w.getframerate()} Hz x {w.getnchannels()} channels")
        x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float64)
    x = resample_poly(x, SAMPLE_RATE, ESPEAK_RATE)
    loud = np.flatnonzero(np.abs(x) > 0.02 * np.abs(x).max())
    margin = int(MARGIN_S * SAMPLE_RATE)
    x = x[max(0, loud[0] - margin):loud[-1] + margin]
    return np.round(x * (PEAK * 32767 / np.abs(x).max())).astype(np.int16)


def main() -> None:
    version = subprocess.run(["espeak-ng", "--version"], check=True, capture_output=True, text=True).stdout
    clips: list[tuple[np.ndarray, str, str, str, int, int]] = []
    for name, (phrase, spoken) in WAKE_WORDS.items():
        for voice, speed, pitch in RENDERINGS:
            clips.append((synthesize(spoken, voice, speed, pitch), phrase, name, voice, speed, pitch))
    for i, phrase in enumerate(NEGATIVES):
        voice, speed, pitch = RENDERINGS[i % len(RENDERINGS)]
        clips.append((synthesize(phrase, voice, speed, pitch), phrase, "", voice, speed, pitch))
    audio, text, wake_word, voices, speeds, pitches = zip(*clips, strict=True)
    np.savez_compressed(
        OUT, audio=np.concatenate(audio), offsets=np.cumsum([0, *map(len, audio)]),
        text=np.array(text), wake_word=np.array(wake_word), voice=np.array(voices),
        speed=np.array(speeds, np.int16), pitch=np.array(pitches, np.int16),
        sample_rate=np.int32(SAMPLE_RATE), espeak_version=np.array(version.split(" Data at")[0].strip()))
    seconds = sum(map(len, audio)) / SAMPLE_RATE
    print(f"wrote {OUT}: {len(clips)} clips, {seconds:.1f} s, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
