#!/usr/bin/python3
"""Plain TCP moving a traffic matrix: the reference an m2n round on the same links is held to.

  tcp_matrix.py recv ADDR PORT SENDERS   # a worker rank: takes SENDERS connections, reads each out
  tcp_matrix.py send BYTES ADDR:PORT...  # a trainer rank: BYTES to each address, one thread each

A receiver prints the seconds from its first connection to its last byte; a sender nothing.
"""
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def recv(addr, port, senders):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(senders)
    print("listening", flush=True)
    first = None
    threads = []

    def take(c):
        buf = bytearray(CHUNK)
        while c.recv_into(buf):
            pass
        c.close()

    for _ in range(senders):
        c, _ = s.accept()
        first = first or time.monotonic()
        t = threading.Thread(target=take, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    print(f"{time.monotonic() - first:.3f}", flush=True)


def send(nbytes, peers):
    data = memoryview(b"\0" * CHUNK)

    def push(peer):
        host, port = peer.rsplit(":", 1)
        for _ in range(200):  # the receivers may still be starting
            try:
                c = socket.create_connection((host, int(port)))
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit(f"cannot reach {peer}")
        left = nbytes
        while left > 0:
            n = min(left, CHUNK)
            c.sendall(data[:n])
            left -= n
        c.shutdown(socket.SHUT_WR)
        c.recv(1)
        c.close()

    threads = [threading.Thread(target=push, args=(p,)) for p in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        send(int(sys.argv[2]), sys.argv[3:])
