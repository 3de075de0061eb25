"""Review repro: the writer lock is on a path, not on the database: once <db>.writer.lock
is removed (an operator cleaning 'stale' lock files, `rm data/agentchat.sqlite3*` by a
reset script, a tmp cleaner), the next process creates a new inode and takes the lock
while the first still holds the old one - two writer groups."""
import os, subprocess, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "/work/wt_review_ll")
from storage.sqlite.writer_lock import WriterLock

d = Path(tempfile.mkdtemp(prefix="review_ll_unlink_"))
db = d / "agent.sqlite3"
holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time; sys.path.insert(0, '/work/wt_review_ll')
from storage.sqlite.writer_lock import WriterLock
lock = WriterLock({str(db)!r}); print(lock.try_acquire(), flush=True); time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
try:
    print("first process holds the lock:", holder.stdout.readline().strip())
    print("second, lock file present:", WriterLock(db).try_acquire())
    os.unlink(str(db) + ".writer.lock")
    second = WriterLock(db)
    print("second, after the lock file was removed:", second.try_acquire(), "(first still alive:", holder.poll() is None, ")")
finally:
    holder.kill(); holder.wait()
