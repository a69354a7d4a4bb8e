"""A preload that sends Node's fetch and default HTTP(S) agents through the run's proxy.

Node before 24 (and 22.21) ignores HTTP_PROXY and HTTPS_PROXY. For a run with
hosts the driver sets ``NODE_OPTIONS=--require <this file>``; it replaces the
global undici dispatcher fetch uses (stored under a documented global symbol)
with one whose connector opens a CONNECT tunnel through the proxy, and does the
same for ``http.globalAgent`` and ``https.globalAgent``. Where Node does it
itself (``NODE_USE_ENV_PROXY``, also set) it leaves everything as it is. Code
that builds its own agent or socket is not covered; it reaches nothing.

The server writes it into every root template at ``IN_ROOT`` (standard library only).
"""

from __future__ import annotations

IN_ROOT = "/etc/mainsdk/node-proxy.cjs"

SOURCE = r"""'use strict';
// mainsdk sandbox: route fetch and the default http/https agents through the run's proxy.
(function () {
  const env = process.env;
  const proxy = env.https_proxy || env.HTTPS_PROXY || env.http_proxy || env.HTTP_PROXY;
  if (!proxy) return;
  let url;
  try { url = new URL(proxy); } catch (e) { return; }
  const [major, minor] = process.versions.node.split('.').map(Number);
  // Node 24.5+ and 22.21+ honour the variables themselves under NODE_USE_ENV_PROXY (also set).
  const builtin = major > 24 || (major === 24 && minor >= 5) || (major === 22 && minor >= 21);
  const net = require('net');
  const tls = require('tls');
  const user = decodeURIComponent(url.username);
  const auth = user
    ? 'Proxy-Authorization: Basic ' +
      Buffer.from(user + ':' + decodeURIComponent(url.password)).toString('base64') + '\r\n'
    : '';

  // A socket to host:port through a CONNECT tunnel; callback(err) carries the proxy's answer.
  function tunnel(host, port, callback) {
    host = String(host).replace(/^\[|\]$/g, '');
    const target = (net.isIPv6(host) ? '[' + host + ']' : host) + ':' + port;
    const socket = net.connect(Number(url.port) || 80, url.hostname);
    let head = Buffer.alloc(0);
    let done = false;
    const finish = (err, sock) => { if (!done) { done = true; callback(err, sock); } };
    socket.once('error', (err) => finish(err));
    socket.once('connect', () => {
      socket.write('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\n' + auth + '\r\n');
    });
    socket.on('data', function onData(chunk) {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > 65536) { socket.destroy(); finish(new Error('proxy answer too long')); }
        return;
      }
      socket.removeListener('data', onData);
      const status = head.subarray(0, end).toString('latin1').split('\r\n')[0];
      if (status.split(' ')[1] !== '200') {
        const body = head.subarray(end + 4).toString().trim();
        socket.destroy();
        const err = new Error('the proxy refused CONNECT ' + target + ': ' + status + (body ? ' - ' + body : ''));
        err.code = 'ERR_PROXY_TUNNEL';
        return finish(err);
      }
      const rest = head.subarray(end + 4);
      if (rest.length) socket.unshift(rest);
      finish(null, socket);
    });
  }

  function overTls(socket, options) {
    return tls.connect(Object.assign({}, options, { socket: socket, host: undefined, port: undefined }));
  }

  const sym = Symbol.for('undici.globalDispatcher.1');
  if (typeof fetch === 'function' && !builtin) {
    // fetch creates its dispatcher on first use; an aborted fetch does that without any traffic.
    if (globalThis[sym] === undefined) fetch('http://127.0.0.1:9/', { signal: AbortSignal.abort() }).catch(() => {});
    const current = globalThis[sym];
    if (current && current.constructor && current.constructor.name === 'Agent') {
      const Agent = current.constructor;
      globalThis[sym] = new Agent({
        connect(opts, callback) {
          const secure = opts.protocol === 'https:';
          const host = String(opts.hostname).replace(/^\[|\]$/g, '');
          tunnel(host, Number(opts.port) || (secure ? 443 : 80), (err, socket) => {
            if (err) return callback(err);
            if (!secure) return callback(null, socket);
            const servername = opts.servername || (net.isIP(host) ? undefined : host);
            const secured = overTls(socket, { servername: servername, ALPNProtocols: ['http/1.1'] });
            const onError = (e) => callback(e);
            secured.once('error', onError);
            secured.once('secureConnect', () => { secured.removeListener('error', onError); callback(null, secured); });
          });
        },
      });
    }
  }
  if (!builtin) {
    const http = require('http');
    const https = require('https');
    http.globalAgent.createConnection = function (options, oncreate) {
      tunnel(options.host || options.hostname || 'localhost', options.port || 80, oncreate);
    };
    https.globalAgent.createConnection = function (options, oncreate) {
      tunnel(options.host || options.hostname || 'localhost', options.port || 443, (err, socket) => {
        if (err) return oncreate(err);
        oncreate(null, overTls(socket, options));
      });
    };
  }
})();
"""
