package faultproxy

import (
	"net"
)

// Listener is a net.Listener with a Proxy in front of it: Addr reports the
// proxy's address. A server that advertises its listener's address to
// clients (a Kafka broker in its metadata, say) then routes every client
// connection, those that metadata leads to included, through the proxy.
type Listener struct {
	net.Listener
	// Proxy forwards to the listener; switch faults on it.
	Proxy *Proxy
}

// Listen listens on network and address and starts a Proxy in front of the
// listener. Closing the Listener closes the Proxy too.
func Listen(network, address string) (*Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	p, err := Start(ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &Listener{Listener: ln, Proxy: p}, nil
}

// ListenTo returns Listen as a server's listen function
// (kfakebroker.Options.Listen): *p is set to the Proxy of the listener it
// makes.
func ListenTo(p **Proxy) func(network, address string) (net.Listener, error) {
	return func(network, address string) (net.Listener, error) {
		ln, err := Listen(network, address)
		if err != nil {
			return nil, err
		}
		*p = ln.Proxy
		return ln, nil
	}
}

// Addr returns the proxy's address.
func (l *Listener) Addr() net.Addr {
	addr, err := net.ResolveTCPAddr("tcp", l.Proxy.Addr())
	if err != nil {
		return l.Listener.Addr()
	}
	return addr
}

// Close closes the listener and the proxy.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.Proxy.Close()
	return err
}
