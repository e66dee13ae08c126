# The compiled helper in _pagein.c: madvise(2) over buffer[start:end], the GIL released.
from typing_extensions import Buffer

def madvise(buffer: Buffer, start: int, end: int, advice: int, /) -> None: ...
