package middleware

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// responseWriter records the status a handler writes. It keeps
// http.Flusher, http.Hijacker and io.ReaderFrom working where the writer it
// wraps offers them, and http.ResponseController through Unwrap.
type responseWriter struct {
	http.ResponseWriter
	status int
	// header, when set, is called once with the final status just before
	// the header is written, so that it can still add fields.
	header func(status int)
}

// final records the final status and calls header.
func (w *responseWriter) final(status int) {
	w.status = status
	if w.header != nil {
		w.header(status)
	}
}

// Status returns the status written, 200 when the handler wrote a body
// without one, and 0 when it wrote nothing (which net/http answers 200).
func (w *responseWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// WriteHeader records the first final status and passes it on.
func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.final(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and passes b on.
func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.final(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sends buffered data to the client, if the wrapped writer can.
func (w *responseWriter) Flush() {
	if w.status == 0 {
		w.final(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection, if the wrapped writer allows it.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.final(http.StatusSwitchingProtocols)
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// ReadFrom copies from src, through the wrapped writer's ReadFrom where it
// has one.
func (w *responseWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.final(http.StatusOK)
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides ReadFrom, so that io.Copy does not call back into it.
type writerOnly struct{ io.Writer }
