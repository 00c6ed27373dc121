//! Helpers shared by the end-to-end tests of `roce-observer` (each test file includes this
//! module).

fn block(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let len = (body.len() + 12) as u32;
    let mut b = Vec::new();
    b.extend(kind.to_le_bytes());
    b.extend(len.to_le_bytes());
    b.extend(body);
    b.extend(len.to_le_bytes());
    b
}

/// A pcapng with one interface per `(linktype, name)`; every record goes to interface
/// `iface_of(i)`, with nanosecond timestamps.
pub fn pcapng(
    ifaces: &[(u16, &str)],
    records: &[(u32, u32, Vec<u8>)],
    iface_of: impl Fn(usize) -> u32,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut shb = Vec::new();
    shb.extend(0x1a2b_3c4du32.to_le_bytes());
    shb.extend(1u16.to_le_bytes());
    shb.extend(0u16.to_le_bytes());
    shb.extend((-1i64).to_le_bytes());
    out.extend(block(0x0a0d_0d0a, &shb));
    for (lt, name) in ifaces {
        let mut idb = Vec::new();
        idb.extend(lt.to_le_bytes());
        idb.extend(0u16.to_le_bytes());
        idb.extend(0u32.to_le_bytes());
        // if_name
        let mut name_opt = name.as_bytes().to_vec();
        let nlen = name_opt.len() as u16;
        while !name_opt.len().is_multiple_of(4) {
            name_opt.push(0);
        }
        idb.extend(2u16.to_le_bytes());
        idb.extend(nlen.to_le_bytes());
        idb.extend(name_opt);
        // if_tsresol = 9 (nanoseconds)
        idb.extend(9u16.to_le_bytes());
        idb.extend(1u16.to_le_bytes());
        idb.extend([9, 0, 0, 0]);
        idb.extend([0, 0, 0, 0]);
        out.extend(block(1, &idb));
    }
    for (i, (sec, usec, data)) in records.iter().enumerate() {
        let ts = u64::from(*sec) * 1_000_000_000 + u64::from(*usec) * 1000;
        let mut epb = Vec::new();
        epb.extend(iface_of(i).to_le_bytes());
        epb.extend(((ts >> 32) as u32).to_le_bytes());
        epb.extend((ts as u32).to_le_bytes());
        epb.extend((data.len() as u32).to_le_bytes());
        epb.extend((data.len() as u32).to_le_bytes());
        epb.extend(data);
        out.extend(block(6, &epb));
    }
    out
}
