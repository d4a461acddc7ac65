"""Prompt lengths of the Spec-Bench questions the presets replay.

The presets use the Spec-Bench questions (Xia et al., 2024) of the SpecFit
workloads (§4.1, App. B): GSM8K = ``math_reasoning`` question ids 401–480,
CNN/DailyMail = ``summarization`` ids 241–320 (the CNN/DM preset uses the
first 40).  Only the whitespace-separated word count of each question's text
is kept here (all turns joined by a space), so the generator needs no data
file at run time.

No Qwen tokenizer is available offline, so the prompt length in tokens is
estimated from the word count by an affine map ``tokens = round(a·words + c)``
whose two coefficients are fitted to the only published token figures, the
CNN/DM input range 156–1,496 tokens (SpecFit §4.2): the shortest of the first
40 articles has 109 words and the longest 1,055, so a = 1340/946 ≈ 1.4165
tokens per word and c ≈ 1.60 tokens (chat-template overhead).  The same map
is used for GSM8K.
"""

from __future__ import annotations

import numpy as np

# The two published end points of the CNN/DM input range and the word counts
# of the articles that attain them (question ids 277 and 273).
_WORDS_LO, _WORDS_HI = 109, 1055
_TOKENS_LO, _TOKENS_HI = 156, 1496
TOKENS_PER_WORD = (_TOKENS_HI - _TOKENS_LO) / (_WORDS_HI - _WORDS_LO)
TEMPLATE_TOKENS = _TOKENS_LO - TOKENS_PER_WORD * _WORDS_LO

GSM8K_WORDS = {
    401: 37, 402: 39, 403: 29, 404: 78, 405: 65, 406: 34, 407: 27, 408: 32,
    409: 53, 410: 55, 411: 32, 412: 37, 413: 27, 414: 50, 415: 69, 416: 50,
    417: 30, 418: 31, 419: 37, 420: 34, 421: 31, 422: 62, 423: 98, 424: 63,
    425: 60, 426: 26, 427: 32, 428: 55, 429: 50, 430: 45, 431: 29, 432: 34,
    433: 47, 434: 81, 435: 33, 436: 25, 437: 97, 438: 36, 439: 50, 440: 39,
    441: 27, 442: 42, 443: 59, 444: 20, 445: 60, 446: 52, 447: 45, 448: 33,
    449: 22, 450: 25, 451: 65, 452: 61, 453: 91, 454: 54, 455: 17, 456: 58,
    457: 82, 458: 63, 459: 26, 460: 39, 461: 57, 462: 47, 463: 37, 464: 32,
    465: 31, 466: 91, 467: 40, 468: 46, 469: 31, 470: 32, 471: 52, 472: 24,
    473: 52, 474: 27, 475: 41, 476: 33, 477: 26, 478: 28, 479: 54, 480: 18,
}

CNNDM_WORDS = {
    241: 531, 242: 530, 243: 493, 244: 701, 245: 295, 246: 573, 247: 552, 248: 907,
    249: 456, 250: 329, 251: 224, 252: 538, 253: 1038, 254: 487, 255: 518, 256: 592,
    257: 659, 258: 888, 259: 209, 260: 687, 261: 220, 262: 446, 263: 416, 264: 722,
    265: 343, 266: 720, 267: 747, 268: 199, 269: 901, 270: 591, 271: 478, 272: 543,
    273: 1055, 274: 822, 275: 153, 276: 443, 277: 109, 278: 781, 279: 1029, 280: 773,
    281: 533, 282: 878, 283: 283, 284: 542, 285: 816, 286: 278, 287: 237, 288: 1131,
    289: 438, 290: 523, 291: 258, 292: 487, 293: 398, 294: 339, 295: 1026, 296: 647,
    297: 1024, 298: 897, 299: 317, 300: 272, 301: 510, 302: 604, 303: 545, 304: 327,
    305: 266, 306: 1137, 307: 358, 308: 349, 309: 422, 310: 478, 311: 874, 312: 503,
    313: 399, 314: 370, 315: 318, 316: 1096, 317: 1067, 318: 1002, 319: 429, 320: 610,
}

QUESTION_WORDS = {"gsm8k": GSM8K_WORDS, "cnndm": CNNDM_WORDS}


def estimate_tokens(words) -> np.ndarray:
    """Prompt tokens from word counts (the affine estimate in the module docstring)."""
    w = np.asarray(words, dtype=np.float64)
    return np.rint(TOKENS_PER_WORD * w + TEMPLATE_TOKENS).astype(np.int32)


def question_table(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """Question ids (in Spec-Bench order) and estimated prompt tokens of ``dataset``."""
    table = QUESTION_WORDS[dataset]
    ids = np.array(sorted(table), dtype=np.int64)
    return ids, estimate_tokens([table[i] for i in ids])
