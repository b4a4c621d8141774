// Package migrate is what moving an existing atproto account onto a baton chain needs
// beyond the format itself: the account's records from its repository CAR
// (ReadCARRecords, for `baton submit --car`) and an offline check of its DID document
// (CheckDIDDocument, for `baton init --did-doc`). It uses indigo's repository and
// identity packages, which the format package (signer/chain/atproto) does not need:
// a program that only verifies a chain does not link them.
package migrate
