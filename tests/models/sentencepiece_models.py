"""Trains two small SentencePiece models for tests/models/tokenizer_test.cpp and writes what
Python's sentencepiece makes of some sentences.

Usage: sentencepiece_models.py OUT_DIR

Writes OUT_DIR/bpe.model (BPE with byte fallback) and OUT_DIR/unigram.model (unigram, no byte
fallback: characters outside the corpus are <unk>), each trained on a corpus generated here
(Llama's layout: <unk> 0, <s> 1, </s> 2, no pad), and OUT_DIR/<kind>.json with the vocabulary
size, the sentences, sentencepiece's ids for each (without BOS) and its decoding of those ids.
"""
import json
import os
import random
import sys

import sentencepiece as spm

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
         "jovial kings and their zebras pack my box with five dozen liquor jugs "
         "numbers like 42 and 1999 appear in fences of 3 meters").split()

SENTENCES = [
    "the quick brown fox",
    "Hello, World! How are you?",
    "a lazy dog jumps over 42 fences.",
    "  leading and   repeated   spaces ",
    "unknown characters: 漢字 and emoji 🙂",
    "Ünïcödé façade",
    "tabs\tand\nnew lines",
    "",
    "zebras",
    "<s> is written as text here",
]


def main():
    out = sys.argv[1]
    rng = random.Random(0)
    corpus = os.path.join(out, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(2000):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
            if rng.random() < 0.3:
                words[0] = words[0].capitalize()
            f.write(" ".join(words) + rng.choice([".", "!", "?", ",", ""]) + "\n")
    for kind, vocab_size in (("bpe", 400), ("unigram", 100)):
        prefix = os.path.join(out, kind)
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, model_type=kind, vocab_size=vocab_size,
            character_coverage=1.0, byte_fallback=(kind == "bpe"), unk_id=0, bos_id=1, eos_id=2,
            pad_id=-1, num_threads=1, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        ids = [sp.encode(s) for s in SENTENCES]
        with open(prefix + ".json", "w", encoding="utf-8") as f:
            json.dump({"vocab_size": sp.get_piece_size(), "sentences": SENTENCES, "ids": ids,
                       "decoded": [sp.decode(i) for i in ids]}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
