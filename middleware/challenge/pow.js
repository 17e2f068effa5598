// gatecount proof of work: finds the answer to a puzzle of the sign-in
// guard, as challenge.Solve does. gatecountSolve(token, bits)
// tries the counters 0, 1, 2, ... and returns {answer, hashes}: the first
// answer token + "." + counter whose SHA-256 starts with bits zero bits.
(function (root) {
  "use strict";
  var K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);
  var W = new Uint32Array(64), H = new Uint32Array(8);

  // sha256 hashes the ASCII string s into H.
  function sha256(s) {
    var n = s.length, blocks = ((n + 8) >> 6) + 1, bytes = new Uint8Array(blocks * 64), i, j;
    for (i = 0; i < n; i++) bytes[i] = s.charCodeAt(i);
    bytes[n] = 0x80;
    var bitLen = n * 8;
    bytes[blocks * 64 - 4] = bitLen >>> 24; bytes[blocks * 64 - 3] = bitLen >>> 16;
    bytes[blocks * 64 - 2] = bitLen >>> 8; bytes[blocks * 64 - 1] = bitLen;
    H[0] = 0x6a09e667; H[1] = 0xbb67ae85; H[2] = 0x3c6ef372; H[3] = 0xa54ff53a;
    H[4] = 0x510e527f; H[5] = 0x9b05688c; H[6] = 0x1f83d9ab; H[7] = 0x5be0cd19;
    for (var b = 0; b < blocks; b++) {
      for (i = 0; i < 16; i++) {
        j = b * 64 + i * 4;
        W[i] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
      }
      for (i = 16; i < 64; i++) {
        var x = W[i - 15], y = W[i - 2];
        var s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
        var s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
      }
      var a = H[0], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7], bb = H[1];
      for (i = 0; i < 64; i++) {
        var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
        var t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
        var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
        var t2 = (S0 + ((a & bb) ^ (a & c) ^ (bb & c))) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = bb; bb = a; a = (t1 + t2) | 0;
      }
      H[0] += a; H[1] += bb; H[2] += c; H[3] += d; H[4] += e; H[5] += f; H[6] += g; H[7] += h;
    }
  }

  // zeros returns the leading zero bits of H, up to 64.
  function zeros() {
    for (var i = 0; i < 8; i++) {
      if (H[i] !== 0) return i * 32 + Math.clz32(H[i]);
    }
    return 256;
  }

  function gatecountSolve(token, bits) {
    for (var c = 0; ; c++) {
      var answer = token + "." + c;
      sha256(answer);
      if (zeros() >= bits) return { answer: answer, hashes: c + 1 };
    }
  }

  root.gatecountSolve = gatecountSolve;
  if (typeof module !== "undefined") module.exports = gatecountSolve;
})(typeof self !== "undefined" ? self : this);
