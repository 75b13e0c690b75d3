//! A transaction the store gave up waiting for on one etcd member, and sent
//! again to the next, can still be applied by the first one, late: after the
//! store's next transaction. The nemesis saw it (a volume's DeleteVolume
//! answered OK, then the record back as it was before the delete). Here a
//! small proxy in front of the member holds one request long enough, and
//! drops the cancel the client sends when it gives up, so the held copy
//! lands after the next change, as a member cut off and then healed lands it.

use std::sync::{Arc, Mutex};

use berth::model::{VolumeRecord, VolumeSpec, new_id};
use berth::store::{EtcdSettings, EtcdStore, Store};
use berth_tests::EtcdCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

const PREFACE: usize = 24;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const END_STREAM: u8 = 0x1;

/// One HTTP/2 frame: its type, flags and stream, and its bytes whole.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    bytes: Vec<u8>,
}

async fn read_frame(from: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Frame> {
    let mut head = [0u8; 9];
    from.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut bytes = head.to_vec();
    bytes.resize(9 + len, 0);
    from.read_exact(&mut bytes[9..]).await?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        bytes,
    })
}

#[derive(Default)]
struct Held {
    holding: bool,
    /// What the client sent while held, in order, less its cancels.
    frames: Vec<u8>,
    /// The streams the held requests opened.
    streams: Vec<u32>,
    /// Where the held bytes go on release.
    to_member: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

/// A TCP proxy to one etcd member that, while holding, keeps what the
/// client sends and forgets the client's cancels.
struct HoldingProxy {
    url: String,
    held: Arc<Mutex<Held>>,
    /// Notified when the member finishes answering a held stream.
    answered: Arc<Notify>,
}

impl HoldingProxy {
    async fn start(member: String) -> HoldingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let held = Arc::new(Mutex::new(Held::default()));
        let answered = Arc::new(Notify::new());
        let (h, a) = (held.clone(), answered.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = TcpStream::connect(&member).await.unwrap();
                tokio::spawn(relay(client, upstream, h.clone(), a.clone()));
            }
        });
        HoldingProxy { url, held, answered }
    }

    fn hold(&self) {
        self.held.lock().unwrap().holding = true;
    }

    /// Sends on what was held and waits until the member has answered it.
    async fn release(&self) {
        let answered = self.answered.notified();
        tokio::pin!(answered);
        answered.as_mut().enable();
        {
            let mut held = self.held.lock().unwrap();
            assert!(!held.streams.is_empty(), "no request was held");
            held.holding = false;
            let frames = std::mem::take(&mut held.frames);
            held.to_member.as_ref().unwrap().send(frames).unwrap();
        }
        answered.await;
    }
}

async fn relay(client: TcpStream, member: TcpStream, held: Arc<Mutex<Held>>, answered: Arc<Notify>) {
    let (mut client_in, mut client_out) = client.into_split();
    let (mut member_in, mut member_out) = member.into_split();
    let (to_member, mut queued) = mpsc::unbounded_channel::<Vec<u8>>();
    held.lock().unwrap().to_member = Some(to_member.clone());
    tokio::spawn(async move {
        while let Some(bytes) = queued.recv().await {
            if member_out.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let watching = held.clone();
    tokio::spawn(async move {
        while let Ok(frame) = read_frame(&mut member_in).await {
            let ends = frame.flags & END_STREAM != 0 && frame.kind <= HEADERS;
            if ends && watching.lock().unwrap().streams.contains(&frame.stream) {
                answered.notify_one();
            }
            if client_out.write_all(&frame.bytes).await.is_err() {
                return;
            }
        }
    });
    let mut preface = vec![0u8; PREFACE];
    if client_in.read_exact(&mut preface).await.is_err() {
        return;
    }
    let _ = to_member.send(preface);
    while let Ok(frame) = read_frame(&mut client_in).await {
        let mut h = held.lock().unwrap();
        if !h.holding {
            let _ = to_member.send(frame.bytes);
            continue;
        }
        match frame.kind {
            // The cancel of a request that gave up: a member cut off from
            // its client never hears it either.
            RST_STREAM => {}
            HEADERS => {
                h.streams.push(frame.stream);
                h.frames.extend(frame.bytes);
            }
            _ => h.frames.extend(frame.bytes),
        }
    }
}

/// A put that got no answer from member 1 in time lands through member 2;
/// the volume is then removed; member 1 then applies its copy of the put.
/// The record must stay removed, and the store must go on writing.
#[test]
fn a_late_copy_of_a_transaction_does_not_undo_a_later_one() {
    let etcd = EtcdCluster::start(1);
    let direct = etcd.endpoints()[0].clone();
    berth_tests::block_on(async {
        let proxy = HoldingProxy::start(direct.trim_start_matches("http://").to_string()).await;
        let fence = berth_tests::fence(&direct, b"/berth-late/leader").await;
        // Member 1 is the proxy: the store's reads at connect go through it.
        let settings = EtcdSettings::new(
            vec![proxy.url.clone(), direct.clone()],
            Some("/berth-late".into()),
        )
        .unwrap();
        let store = EtcdStore::connect(settings, Some(fence)).await.unwrap();

        let record = VolumeRecord::new(new_id(), VolumeSpec::default());
        let key = format!("/berth-late/volumes/{}", record.id).into_bytes();
        proxy.hold();
        store.put(&record).await.expect("the put lands through member 2");
        store.remove(&record.id).await.expect("the removal lands");
        proxy.release().await;

        assert_eq!(
            berth_tests::stored(&direct, &key).await,
            None,
            "the late copy of the put brought back a removed record"
        );

        // A copy of a transaction the store was never answered for that
        // lands before the next one (here put by hand) moves the order on:
        // the store learns where it stands and goes on.
        berth_tests::put(&direct, b"/berth-late/writer", b"an unanswered transaction").await;
        let after = VolumeRecord::new(new_id(), VolumeSpec::default());
        store.put(&after).await.expect("a write after the late copy");
        let key = format!("/berth-late/volumes/{}", after.id).into_bytes();
        assert!(berth_tests::stored(&direct, &key).await.is_some());
    });
}
