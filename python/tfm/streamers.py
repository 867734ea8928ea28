"""transformers' streamers: text as generate() produces it, printed or handed to another thread."""
import queue

from . import _tfm


class TextStreamer:
    """Prints the text as the tokens come (only complete UTF-8 characters), the prompt too unless
    skip_prompt. generate() calls put() with the prompt's ids, then with each new token, then
    end()."""

    def __init__(self, tokenizer, skip_prompt=False, **decode_kwargs):
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self._skip = decode_kwargs.get("skip_special_tokens", False)
        self._decoder = None
        self._prompt_pending = True

    def put(self, value):
        ids = [int(i) for i in value]
        if self._prompt_pending:
            self._prompt_pending = False
            self._decoder = _tfm.StreamingDecoder(self.tokenizer._native, self._skip)
            if self.skip_prompt:
                return
        text = "".join(self._decoder.put(i) for i in ids)
        if text:
            self.on_finalized_text(text)

    def end(self):
        text = self._decoder.flush() if self._decoder is not None else ""
        self._prompt_pending = True
        self.on_finalized_text(text, stream_end=True)

    def on_finalized_text(self, text, stream_end=False):
        print(text, flush=True, end="" if not stream_end else None)


class TextIteratorStreamer(TextStreamer):
    """The text as an iterator, for another thread than the one generate() runs on; `timeout`
    seconds without text raise queue.Empty."""

    def __init__(self, tokenizer, skip_prompt=False, timeout=None, **decode_kwargs):
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.text_queue = queue.Queue()
        self.stop_signal = None
        self.timeout = timeout

    def on_finalized_text(self, text, stream_end=False):
        if text:
            self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self):
        return self

    def __next__(self):
        value = self.text_queue.get(timeout=self.timeout)
        if value == self.stop_signal:
            raise StopIteration()
        return value

