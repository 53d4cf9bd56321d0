# The exec relay that runs Open MPI inside the emulated cluster (used by
# tools/mpi-cluster.sh): "serve DIR" runs in each node (under swy-run) and
# executes commands sent over DIR/nodeN.sock; "run DIR NODE CMD" sends one
# and relays its output and exit status; "agent [opts] HOST CMD" is
# mpirun's rsh agent.
import json, os, socket, sys, threading

MARK = b"\0SWY-RELAY-EXIT "

def serve(d):
    node = os.environ["SWY_NODE"]
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(os.path.join(d, f"node{node}.sock"))
    srv.listen(64)
    open(os.path.join(d, f"node{node}.ready"), "w").close()
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            line = b""
            while not line.endswith(b"\n"):  # byte by byte: stdin follows
                b = conn.recv(1)
                if not b:
                    os._exit(1)
                line += b
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                os.setsid()
                for fd in (0, 1, 2):
                    os.dup2(conn.fileno(), fd)
                conn.close()
                os.chdir(req["cwd"])
                os.execv("/bin/sh", ["/bin/sh", "-c", req["cmd"]])
            _, status = os.waitpid(pid, 0)
            try:
                conn.sendall(MARK + str(os.waitstatus_to_exitcode(status))
                             .encode() + b"\n")
            except OSError:
                pass
            os._exit(0)
        conn.close()
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass

def run(d, node, cmd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.path.join(d, f"node{node}.sock"))
    s.sendall(json.dumps({"cmd": cmd, "cwd": os.getcwd()}).encode() + b"\n")
    def pump_stdin():
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                s.sendall(data)
        except OSError:
            pass
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    threading.Thread(target=pump_stdin, daemon=True).start()
    out, tail, keep = sys.stdout.buffer, b"", len(MARK) + 8
    while True:
        data = s.recv(65536)
        if not data:
            break
        tail += data
        if tail.find(MARK) < 0 and len(tail) > keep:
            out.write(tail[:-keep])
            out.flush()
            tail = tail[-keep:]
    cut = tail.find(MARK)
    out.write(tail if cut < 0 else tail[:cut])
    out.flush()
    return 255 if cut < 0 else int(tail[cut + len(MARK):].split()[0])

mode, d = sys.argv[1], sys.argv[2]
if mode == "serve":
    serve(d)
elif mode == "run":
    sys.exit(run(d, sys.argv[3], sys.argv[4]))
else:  # agent [ssh-style options] HOST CMD...
    args = [a for a in sys.argv[3:]]
    while args and args[0].startswith("-"):
        args.pop(0)
    host = args[0]
    node = (int(host.rsplit(".", 1)[1]) - 1 if host.startswith("198.18.0.")
            else int(host.removeprefix("node")))
    sys.exit(run(d, node, " ".join(args[1:])))
