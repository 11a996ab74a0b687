"""kiln.Generator: LLM generation with a model compiled for generation (`kv_cache:` in its
config) through kiln_generator_* (runtime/README.md, "Generation")."""

import ctypes
from collections import namedtuple

from . import _lib
from .errors import InvalidArgumentError
from .runtime import MODE_NAMES, _parse_mode

# token: the sampled token id; finished: it was a stop token or the max_new_tokens-th;
# logits: the vocab_size logits it was sampled from (a list of floats) when asked for, else None.
StepToken = namedtuple("StepToken", "seq token finished logits")
KvCacheInfo = namedtuple("KvCacheInfo", "num_blocks free_blocks block_size max_sequences "
                                        "max_seq_len live_sequences bytes")


class Generator(_lib.OwnedHandle):
    """Sequences, prefill, ragged decode steps and GPU sampling (kiln_generator). Use
    `model.generator(mode=..., max_blocks=..., memory_fraction=..., return_logits=...)`."""

    _FREE = "kiln_generator_free"
    _WHAT = "generator"

    def __init__(self, model, mode="ARTIFACT", max_blocks=0, memory_fraction=0.0,
                 return_logits=False):
        f = _lib.function
        opts = _lib.GeneratorOptionsC()
        f("kiln_generator_options_init")(ctypes.byref(opts))
        opts.mode = _parse_mode(mode)
        opts.max_blocks = int(max_blocks)
        opts.memory_fraction = float(memory_fraction)
        opts.return_logits = 1 if return_logits else 0
        self.return_logits = bool(return_logits)
        handle = ctypes.c_void_p()
        _lib.check(f("kiln_generator_create")(model._live(), ctypes.byref(opts),
                                              ctypes.byref(handle)), "creating a generator")
        self._handle = handle
        v, m = ctypes.c_int64(), ctypes.c_int32()
        _lib.check(f("kiln_generator_vocab_size")(handle, ctypes.byref(v)))
        _lib.check(f("kiln_generator_mode")(handle, ctypes.byref(m)))
        reason = ctypes.c_char_p()
        _lib.check(f("kiln_generator_downgrade_reason")(handle, ctypes.byref(reason)))
        self.vocab_size = int(v.value)
        self.mode = MODE_NAMES.get(int(m.value), str(m.value))
        self.downgrade_reason = (reason.value or b"").decode()

    def add(self, seq, temperature=0.0, top_k=0, top_p=1.0, seed=0, max_new_tokens=16,
            stop_tokens=()):
        """A new empty sequence with id `seq` and its sampling options (greedy by default)."""
        opts = _lib.SequenceOptionsC()
        _lib.function("kiln_sequence_options_init")(ctypes.byref(opts))
        opts.temperature, opts.top_k, opts.top_p = float(temperature), int(top_k), float(top_p)
        opts.seed, opts.max_new_tokens = int(seed), int(max_new_tokens)
        stops = (ctypes.c_int64 * len(stop_tokens))(*[int(t) for t in stop_tokens])
        opts.stop_tokens = stops if len(stop_tokens) else None
        opts.n_stop_tokens = len(stop_tokens)
        _lib.check(_lib.function("kiln_generator_add")(self._live(), int(seq),
                                                       ctypes.byref(opts)))

    def _tokens(self, n):
        out = (_lib.StepTokenC * n)()
        bufs = []
        if self.return_logits:
            for t in out:
                buf = (ctypes.c_float * self.vocab_size)()
                bufs.append(buf)
                t.logits = ctypes.cast(buf, ctypes.POINTER(ctypes.c_float))
                t.logits_capacity = self.vocab_size
        return out, bufs

    def _result(self, out, bufs):
        return [StepToken(int(t.seq), int(t.token), bool(t.finished),
                          list(bufs[i]) if bufs else None) for i, t in enumerate(out)]

    def prefill(self, seq, prompt):
        """Feeds the prompt (token ids) to sequence `seq`; returns its next token (StepToken)."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise InvalidArgumentError(f"sequence {seq}: the prompt is empty")
        ids = (ctypes.c_int64 * len(prompt))(*prompt)
        out, bufs = self._tokens(1)
        _lib.check(_lib.function("kiln_generator_prefill")(self._live(), int(seq), ids,
                                                           len(prompt), out))
        return self._result(out, bufs)[0]

    def decode(self, seqs):
        """One decode step of the listed sequences; a StepToken per sequence, in order."""
        seqs = [int(s) for s in seqs]
        ids = (ctypes.c_int64 * max(1, len(seqs)))(*seqs)
        out, bufs = self._tokens(len(seqs))
        _lib.check(_lib.function("kiln_generator_decode")(self._live(), ids, len(seqs), out))
        return self._result(out, bufs)

    def free(self, seq):
        """Ends sequence `seq`; its blocks return to the cache."""
        _lib.check(_lib.function("kiln_generator_free_sequence")(self._live(), int(seq)))

    def generate(self, prompt, seq=0, **sampling):
        """Greedy (or sampled) tokens for one prompt: add, prefill, decode until finished, free."""
        self.add(seq, **sampling)
        try:
            t = self.prefill(seq, prompt)
            tokens = [t.token]
            while not t.finished:
                t = self.decode([seq])[0]
                tokens.append(t.token)
            return tokens
        finally:
            self.free(seq)

    def kv_cache_info(self):
        c = _lib.KvCacheInfoC()
        _lib.check(_lib.function("kiln_generator_kv_cache_info")(self._live(), ctypes.byref(c)))
        return KvCacheInfo(*(int(getattr(c, f)) for f in KvCacheInfo._fields))
