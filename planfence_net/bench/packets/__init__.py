"""Packet-level links: an owner in a network namespace of its own behind a TUN device whose
packets are delayed and paced by a trace (as Mahimahi does), so the TCP handshake, slow start
and the reverse link's ACKs are charged; and Figure 2 on such links beside the relay's.
"""
