from pathlib import Path
P = Path("harness/sim/backend.py")
L = P.read_text().split("\n")
def idx(prefix):
    return next(i for i, l in enumerate(L) if l.startswith(prefix))
head_end = idx("SETTLE_POLL_S = 0.01")
imports = L[idx("from __future__"):head_end] + [L[idx("from streamlab.sse import")]]
i_pipe, i_conn, i_core, i_clock, i_net, i_server, i_backend = (idx("class SimPipe"), idx("class SimConnection"),
    idx("class ServerCore"), idx("class SimStepClock"), idx("def sim_network"), idx("class SimServer"), idx("class SimBackend"))
i_drive = idx("async def drive(")
transport = L[i_pipe:i_clock] + L[i_net:i_server]
server = ["SETTLE_POLL_S = 0.01", "", ""] + L[i_clock:i_net] + L[i_server:i_backend]
backend = L[i_backend:]
doc = L[:idx("from __future__")]
def write(path, docstring, body):
    Path(path).write_text("\n".join(docstring + imports + ["", ""] + body).rstrip() + "\n")
write("harness/sim/transport.py", ['"""The simulated link between a client and the server: a pipe of bytes that arrive after the',
 "group's latency at its bandwidth, whose writes block past the unread buffer the profile gives,",
 "and the server's one core that the connections' reads and writes share. No sockets.", '"""', ""], transport)
write("harness/sim/server.py", ['"""The real hub and Starlette app on virtual time, behind a simulated ASGI server: the step',
 'loop driven by the cost profile, and each connection served as uvicorn would (harness/sim/transport.py).', '"""', ""], server)
write("harness/sim/backend.py", doc, backend)
