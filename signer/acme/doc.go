// Package acme gets and renews the certificate of the public repository listener
// (the XRPC listener relays crawl) by ACME, with certmagic, on every device that
// serves the name.
//
// Relays crawl only hosts with TLS under a name without a port, and the name's DNS
// may send the CA's HTTP-01 challenge to any device that serves it, not the one that
// asked. Every device therefore uses the same ACME account, whose key is derived from
// the chain key the devices already share (AccountKey), and every device's challenge
// listener answers any challenge with that account's key authorization (token "."
// thumbprint, RFC 8555 section 8.3; the token is checked to be base64url): whichever
// device the CA reaches answers for the one that asked. Each device gets and renews
// its own certificate for the name (certmagic), kept in its data dir. What the CA
// sees is one account ordering the same name from several addresses.
//
// The challenge listener (Config.HTTPAddr, port 80 on the internet) answers the
// challenges and redirects every other request to https://NAME.
package acme
