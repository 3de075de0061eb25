"""Does a child spawned the way the MCP stdio client spawns (anyio.open_process under
uvloop, as serve runs) inherit an inheritable fd, as a --workers worker's lock fd is?"""
import asyncio, os, sys, anyio, uvloop

async def main() -> None:
    fd = os.open("/tmp/review_ll/probe.lock", os.O_RDWR | os.O_CREAT, 0o600)
    os.set_inheritable(fd, True)  # what pass_fds leaves in the worker after exec
    print("lock fd", fd, "inheritable", os.get_inheritable(fd))
    proc = await anyio.open_process(["ls", "-l", "/proc/self/fd"], stdin=-1, stdout=-1, stderr=-1)
    out = await proc.stdout.receive()
    await proc.wait()
    print(out.decode())

(uvloop.run if sys.argv[1:] == ["uvloop"] else asyncio.run)(main())
