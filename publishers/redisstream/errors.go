package redisstream

import (
	"context"
	"errors"
	"strings"
	"syscall"

	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/publishers"
)

var (
	// ErrInvalidConfig is wrapped by the error New returns for an invalid
	// Config; the message names the field.
	ErrInvalidConfig = errors.New("redisstream: invalid config")
	// ErrClosed is returned by Publish and Probe after Close.
	ErrClosed = errors.New("redisstream: publisher closed")
	// ErrInvalidStream is wrapped by the permanent error of a message whose
	// topic makes no valid stream key (see Config.StreamPrefix).
	ErrInvalidStream = errors.New("redisstream: invalid stream")
	// ErrTooLarge is wrapped by the permanent error of a message larger
	// than Config.MaxMessageBytes.
	ErrTooLarge = errors.New("redisstream: message too large")
	// ErrNotReplicated is wrapped by the transient error of every message
	// of a Publish whose WAIT counted fewer replicas than
	// Config.WaitReplicas.
	ErrNotReplicated = errors.New("redisstream: not acknowledged by enough replicas")
)

// Error codes of Redis replies (the reply's first word) by what they say
// about the message. Codes in neither set are transient: NOPERM (an ACL
// refusing the key is an operator's fix away, as Kafka's topic
// authorization is), MOVED and ASK (a cluster node: the sink speaks to a
// standalone server), TRYAGAIN, plain ERR, and any other.
var (
	// messageCodes refuse the message itself: retrying cannot help.
	messageCodes = map[string]bool{
		"WRONGTYPE": true, // the key holds something other than a stream
	}
	// serverCodes mean that the server refuses every write for now, not
	// this message: the sink is unavailable and the relay backs off
	// without spending attempts.
	serverCodes = map[string]bool{
		"OOM":         true, // used_memory above maxmemory, nothing evictable
		"LOADING":     true, // loading its dataset after a restart
		"BUSY":        true, // a script or function runs past busy-reply-threshold
		"READONLY":    true, // a replica: after a failover, the address points at one
		"MASTERDOWN":  true, // a replica that lost its master, replica-serve-stale-data no
		"NOREPLICAS":  true, // min-replicas-to-write not met
		"MISCONF":     true, // snapshots failing with stop-writes-on-bgsave-error
		"NOAUTH":      true, // authentication needed
		"WRONGPASS":   true, // authentication refused
		"CLUSTERDOWN": true,
	}
)

// classify marks err for the relay; it is the one place where go-redis,
// Redis and network errors are translated:
//
//   - publishers.Permanent: the message is refused for itself (WRONGTYPE,
//     ErrInvalidStream, ErrTooLarge);
//   - publishers.Unavailable: Redis cannot take any write now (serverCodes,
//     too many clients), cannot be reached (refused, reset or closed
//     connections, I/O timeouts, TLS failures, a full pool), the publish
//     context's deadline passed, or the publisher is closed;
//   - unchanged: transient (other Redis errors, ErrNotReplicated), or the
//     caller's cancellation.
//
// Errors already marked are returned as they are.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case publishers.IsPermanent(err), errors.Is(err, publishers.ErrUnavailable):
		return err
	case errors.Is(err, ErrInvalidStream), errors.Is(err, ErrTooLarge):
		return publishers.Permanent(err)
	case errors.Is(err, ErrClosed), errors.Is(err, redis.ErrClosed):
		return publishers.Unavailable(err) // no attempt is spent on a closed sink
	case errors.Is(err, context.Canceled):
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		code, _, _ := strings.Cut(rerr.Error(), " ")
		switch {
		case messageCodes[code]:
			return publishers.Permanent(err)
		case serverCodes[code], redis.IsMaxClientsError(err):
			return publishers.Unavailable(err)
		default:
			return err
		}
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) || isNetworkError(err) {
		return publishers.Unavailable(err)
	}
	return err
}

// isNetworkError reports whether err means Redis could not be reached or
// the connection broke (sinknet.IsNetworkError), or a unix socket is not
// there.
func isNetworkError(err error) bool {
	return sinknet.IsNetworkError(err) || errors.Is(err, syscall.ENOENT)
}
