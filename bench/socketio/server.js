// Socket.IO 4.8 as a peer of the pushengine benchmarks: what a team would
// pick instead. One Node process (as one engine process, one nginx worker),
// WebSocket transport only, one room per channel.
//
//   node bench/socketio/server.js --port 8070
//
// Subscribers: GET /socket.io/?EIO=4&transport=websocket (the Engine.IO v4
// open packet `0{...}`), connect to the default namespace (`40`), then
// `42N["subscribe","CH"]` with an ack: the socket joins room CH and the ack
// `43N[true]` answers. Every message published to CH then arrives as
// `42["m",MESSAGE]`, one WebSocket frame per message (the adapter frames a
// broadcast once for every socket). Engine.IO pings (`2`) every
// pingInterval must be answered (`3`) within pingTimeout.
//
// Publisher: POST /pub/CH with a JSON body (keep-alive, pipelined requests
// are answered in order): 201 and the number of sockets reached. GET
// /status: {"subscribers": sockets connected, "rooms": {CH: sockets}, ...};
// GET /health: "ok".
"use strict";

const http = require("http");
const { Server } = require("socket.io");

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const port = Number(option("--port", "8070"));
const host = option("--host", "127.0.0.1");
const pingInterval = Number(option("--ping-interval", "25000"));
const pingTimeout = Number(option("--ping-timeout", "20000"));

const counters = { published: 0, delivered: 0, badPublishes: 0 };

const httpServer = http.createServer((req, res) => {
  const url = req.url || "/";
  if (req.method === "POST" && url.startsWith("/pub/")) {
    const channel = decodeURIComponent(url.slice(5));
    const parts = [];
    req.on("data", (chunk) => parts.push(chunk));
    req.on("end", () => {
      let message;
      try {
        message = JSON.parse(Buffer.concat(parts).toString("utf8"));
      } catch (e) {
        counters.badPublishes++;
        res.writeHead(400, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ error: "the body is not JSON" }));
        return;
      }
      const room = io.sockets.adapter.rooms.get(channel);
      const reached = room ? room.size : 0;
      io.to(channel).emit("m", message);
      counters.published++;
      counters.delivered += reached;
      res.writeHead(reached ? 201 : 202, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ subscribers: reached }));
    });
    return;
  }
  if (req.method === "GET" && url === "/status") {
    const rooms = {};
    for (const [name, members] of io.sockets.adapter.rooms) {
      if (!io.sockets.sockets.has(name)) rooms[name] = members.size; // not a socket's own room
    }
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ subscribers: io.engine.clientsCount, rooms, ...counters }));
    return;
  }
  if (req.method === "GET" && url === "/health") {
    res.writeHead(200, { "Content-Type": "text/plain" });
    res.end("ok\n");
    return;
  }
  res.writeHead(404, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ error: "not found" }));
});
// the publisher's connection stays open between bursts
httpServer.keepAliveTimeout = 300000;
httpServer.headersTimeout = 301000;

const io = new Server(httpServer, {
  transports: ["websocket"],
  serveClient: false,
  perMessageDeflate: false,
  pingInterval,
  pingTimeout,
});

io.on("connection", (socket) => {
  socket.on("subscribe", (channel, ack) => {
    if (typeof channel !== "string" || channel === "") {
      if (typeof ack === "function") ack(false);
      return;
    }
    socket.join(channel);
    if (typeof ack === "function") ack(true);
  });
});

httpServer.listen({ port, host, backlog: 4096 }, () => {
  process.stderr.write(`socket.io ${require("socket.io/package.json").version} on ` +
                       `http://${host}:${port} (node ${process.version})\n`);
});

function stop() {
  io.close();
  httpServer.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
