// Package atproto is baton's atproto commit format (chain.FormatAtproto): the holder
// extends a real atproto repository. Each baton commit carries, inside a baton
// envelope that holds the fence (seq, epoch, signer, prev hash, time, ops with their
// intent IDs, prevData), one atproto repo commit v3 {did, version 3, data, rev, prev
// null, sig} signed with the chain key (P-256, the DID's #atproto key). Records are
// DAG-CBOR blocks; the Merkle Search Tree (indigo's atproto/repo/mst) is maintained
// by every replica from the ops alone, and Repo.Apply checks a commit against the
// previous state: prevData, rev order, canonical bytes, signature, each op's prev CID
// and the recomputed root.
//
// What is not done (see DESIGN.md "atproto format"): the apply and the signer loop
// do not use this format yet (a genesis cannot declare it), there is no key file or
// key import from an existing PDS, did:plc rotation, getRecord over the API or a
// subscribeRepos stream; WriteCAR exports a repository and CommitEvent builds a
// #commit-shaped event.
package atproto
