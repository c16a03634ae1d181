// Package wsframe is the code of the WebSocket transport that works below
// github.com/coder/websocket, in one place. The library does the handshake
// and reads data messages (with its checks: masking, the read limit,
// fragments, control frames inside a fragmented message). This package:
//
//   - writes the server's data frames itself, gathered into a batch that
//     reaches the socket as one write (a server's frame is unmasked: a
//     header, then the payload as is), so a batch of events costs one
//     syscall while staying one WebSocket message per event;
//   - waits for the next message on the socket itself, not inside the
//     library's reader, and answers the control frames between messages
//     (ping with pong, the peer's close with its status, a malformed
//     control frame with 1002), so that an idle connection is not parked
//     on the library's deep stack;
//   - runs the closing handshake with a deadline and pings.
//
// # What it relies on in coder/websocket
//
// Each of these is checked by TestLibraryBehaviours, which fails if an
// upgrade of the library changes one:
//
//  1. Accept hijacks the connection through the http.ResponseWriter it is
//     given, calling its Hijack method, and reads and writes through the
//     bufio.ReadWriter that Hijack returns.
//  2. Accept moves the bytes buffered in that reader (what net/http read
//     past the request) in front of the reader's source, where a Peek
//     brings them back into the buffer.
//  3. The library writes each control frame it sends (pong, ping, close)
//     as one Write on the connection when its writer buffer can hold the
//     frame whole (it flushes after every frame): with a 128-byte buffer,
//     a frame the connection appends to a batch never lands inside one of
//     the library's.
//  4. Conn.Read reads the message whose first frame is at the head of the
//     reader: frames this package consumed before it are not seen again.
//  5. A frame larger than SetReadLimit closes the connection with 1009,
//     and Conn.CloseNow closes the underlying connection.
//
// Nothing here runs on the library's goroutines except Write, which the
// library calls for its control frames.
package wsframe
