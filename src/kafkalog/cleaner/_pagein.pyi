# The compiled helper in _pagein.c: a read every `stride` bytes of buffer[start:end], the GIL
# released.
from typing_extensions import Buffer

def touch(buffer: Buffer, start: int, end: int, stride: int, /) -> None: ...
